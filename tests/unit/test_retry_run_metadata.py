"""A run of retried dead letters that a Dagster run carried out first shows in its metadata."""

from __future__ import annotations

from dagster_project.metadata import run_metadata
from drainer.lifecycle.results import RunResult


def _result(run_id: int, **extra: object) -> RunResult:
    return RunResult(
        run_id=run_id,
        drain="d",
        levels=[],
        resumed=False,
        attempt=1,
        duration_s=1.0,
        published_rows=0,
        **extra,  # type: ignore[arg-type]
    )


def test_retried_dead_letters_are_counted_in_the_metadata():
    retry = _result(7, retried=3, dead_again=1)
    metadata = run_metadata(_result(8, finished=retry))
    assert metadata["finished_run_id"].value == 7
    assert metadata["dead_letters_retried"].value == 3
    assert metadata["dead_letters_failed_again"].value == 1


def test_an_open_plan_finished_first_has_no_retry_counts():
    metadata = run_metadata(_result(8, finished=_result(7)))
    assert "dead_letters_retried" not in metadata
