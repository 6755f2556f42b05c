"""`drainer maintain` on a Delta table that another write commits to meanwhile: a killed run's
MERGE, which the Spark server finishes after its client died, committed under an OPTIMIZE
and made it abort ("Semantic conflicts detected"), and maintain exited with a Java trace."""

import pytest

from drainer.errors import DrainBusy
from spark_jobs.sinks import delta

# how Delta's conflict reaches a Connect client (the OPTIMIZE's abort, seen in a chaos run)
CONFLICT = (
    "[DELTA_CONCURRENT_DELETE_READ] ConcurrentDeleteReadException: This transaction attempted "
    "to read one or more files that were deleted (for example part-00000.parquet) by a "
    "concurrent update. Please try the operation again.\nJVM stacktrace: ..."
)


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(delta, "MAINTAIN_BACKOFF_S", 0.0)


def test_a_conflicting_write_makes_maintenance_try_again():
    tries = []

    def optimize():
        tries.append(1)
        if len(tries) < delta.DELTA_RETRIES:
            raise RuntimeError(CONFLICT)
        return "optimized"

    assert delta.retried_on_conflict("OPTIMIZE", "lake/t", optimize) == "optimized"
    assert len(tries) == delta.DELTA_RETRIES


def test_conflicts_that_go_on_end_in_one_line_that_says_to_run_again():
    def optimize():
        raise RuntimeError(CONFLICT)

    with pytest.raises(DrainBusy) as err:
        delta.retried_on_conflict("OPTIMIZE", "lake/t", optimize)
    said = str(err.value)
    assert "\n" not in said and "JVM" not in said
    assert (
        said.startswith("OPTIMIZE of lake/t conflicted") and "run `drainer maintain` again" in said
    )


def test_other_failures_are_not_retried():
    tries = []

    def optimize():
        tries.append(1)
        raise RuntimeError("[PATH_NOT_FOUND] Path does not exist")

    with pytest.raises(RuntimeError, match="PATH_NOT_FOUND"):
        delta.retried_on_conflict("OPTIMIZE", "lake/t", optimize)
    assert len(tries) == 1
