"""A state table's merge counts reach Dagster's metadata and `drainer status` from any table
sink: a Postgres run's own record as a lakehouse run's table commit."""

from __future__ import annotations

from typing import Any

from dagster_project.metadata import run_metadata
from drainer.cli.status import _upsert_counts
from drainer.lifecycle.results import RunResult
from drainer.observe.status import _upsert_counts as shown_counts

COUNTS = {"rows_inserted": 5, "rows_updated": 2, "rows_deleted": 1, "rows_skipped_older": 3}


def _result(**extra: Any) -> RunResult:
    return RunResult(
        run_id=1, drain="d", levels=[], resumed=False, attempt=1, duration_s=1.0,
        published_rows=8, **extra,
    )  # fmt: skip


def test_a_postgres_merge_without_a_table_commit_has_its_counts_in_the_metadata():
    metadata = run_metadata(_result(upsert=COUNTS))
    assert {k: metadata[f"table_{k}"].value for k in COUNTS} == COUNTS
    assert "table_format" not in metadata


def test_an_append_run_has_no_merge_counts():
    assert not any(k.startswith("table_rows_") for k in run_metadata(_result()))


def test_status_takes_the_postgres_record_first_then_the_table_commits_details():
    commit = {"format": "delta", "details": {"upsert": {**COUNTS, "rows_updated": 9}}}
    assert shown_counts(COUNTS, None) == COUNTS
    assert shown_counts(None, commit) == {**COUNTS, "rows_updated": 9}
    assert shown_counts(None, {"format": "delta"}) is None
    assert shown_counts(None, None) is None


def test_status_prints_a_postgres_runs_counts(capsys):
    _upsert_counts([{"id": 4, "upsert": COUNTS}, {"id": 3, "upsert": None}])
    out = capsys.readouterr().out
    assert "upserts per run" in out
    rows = [line.split("│")[1:-1] for line in out.splitlines() if line.startswith("│")]
    assert [[cell.strip() for cell in row] for row in rows] == [["4", "5", "2", "1", "3"]]
