"""Which launch key a Dagster run drains under (dagster_project.launches.run_launch_key)."""

import dagster as dg
import pytest

from dagster_project.launches import BACKFILL_TAG, run_launch_key

FAILURE, SUCCESS, CANCELED = (
    dg.DagsterRunStatus.FAILURE,
    dg.DagsterRunStatus.SUCCESS,
    dg.DagsterRunStatus.CANCELED,
)


@dg.op
def noop() -> None:
    pass


@dg.job
def a_job() -> None:
    noop()


@pytest.fixture(scope="module")
def instance() -> dg.DagsterInstance:
    return dg.DagsterInstance.ephemeral()  # in memory: no storage to migrate


def _chain(instance: dg.DagsterInstance, attempts: list[tuple[str, dict[str, str]]]) -> list:
    """Runs each a retry of the one before: (status of the attempt, its tags)."""
    runs: list[dg.DagsterRun] = []
    for status, tags in attempts:
        parent = runs[-1] if runs else None
        runs.append(
            instance.create_run_for_job(
                job_def=a_job,
                status=status,
                tags=tags,
                parent_run_id=parent.run_id if parent else None,
                root_run_id=(parent.root_run_id or parent.run_id) if parent else None,
            )
        )
    return runs


@pytest.mark.parametrize(
    ("attempts", "key_of"),
    [
        # a first launch: its own key
        ([(None, {})], 0),
        # a retry of a failed (or canceled) run: the failed run's key, however deep the chain
        ([(FAILURE, {}), (None, {})], 0),
        ([(CANCELED, {}), (None, {})], 0),
        ([(FAILURE, {}), (FAILURE, {}), (None, {})], 0),
        # a re-execution of a run that succeeded drains anew, and its retries take its key
        ([(SUCCESS, {}), (None, {})], 1),
        ([(SUCCESS, {}), (FAILURE, {}), (None, {})], 1),
    ],
)
def test_a_retry_takes_the_key_of_the_first_failed_attempt(instance, attempts, key_of):
    runs = _chain(instance, attempts)
    assert run_launch_key(instance, runs[-1]) == f"dagster-run:{runs[key_of].run_id}"


def test_a_retry_of_a_finished_backfills_run_takes_the_backfill_key(instance):
    # Dagster drops the backfill tags from a retry once the backfill is complete
    runs = _chain(instance, [(FAILURE, {BACKFILL_TAG: "bf1"}), (None, {})])
    assert run_launch_key(instance, runs[-1]) == "dagster-backfill:bf1"
