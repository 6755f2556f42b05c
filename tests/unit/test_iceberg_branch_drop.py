"""Dropping a run's Iceberg branch while another attempt of the run drops it too."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs.sinks.iceberg import drop_branch

# what Iceberg raises when the branch went between Spark's IF EXISTS check and the commit
GONE = "IllegalArgumentException: Branch does not exist: drainer_run_10488364_4c0866ea"


class FakeSession:
    """Answers each `ALTER TABLE` with the next of `outcomes` (None: it worked)."""

    def __init__(self, *outcomes: str | None) -> None:
        self.outcomes = list(outcomes)
        self.statements: list[str] = []
        self.catalog = self  # alter_iceberg refreshes the table after a lost commit race

    def sql(self, statement: str) -> None:
        self.statements.append(statement)
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise RuntimeError(outcome)

    def refreshTable(self, table: str) -> None:  # noqa: N802 - Spark's name
        pass


def test_a_branch_another_attempt_dropped_first_counts_as_dropped() -> None:
    spark: Any = FakeSession(GONE)
    drop_branch(spark, "drainer.drains.t", "drainer_run_1_ab")
    assert spark.statements == [
        "ALTER TABLE drainer.drains.t DROP BRANCH IF EXISTS drainer_run_1_ab"
    ]


def test_a_lost_commit_race_is_tried_again_and_then_may_find_the_branch_gone() -> None:
    spark: Any = FakeSession("CommitFailedException: metadata changed", GONE)
    drop_branch(spark, "drainer.drains.t", "drainer_run_1_ab")
    assert len(spark.statements) == 2


@pytest.mark.parametrize(
    "error", ["CatalogUnavailable: connection refused", "Table does not exist: drainer.drains.t"]
)
def test_any_other_failure_of_the_drop_still_raises(error: str) -> None:
    spark: Any = FakeSession(error)
    with pytest.raises(RuntimeError, match=error.split(":")[0]):
        drop_branch(spark, "drainer.drains.t", "drainer_run_1_ab")
