"""A routed sink's tables in a run's commit (drainer.sinks.routed): one row per table, for
`drainer run` and `drainer status`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from drainer.cli.output import print_table


def table_rows(run_id: int | str, commit: Mapping[str, Any] | None) -> list[list[Any]]:
    """(run, table, version, rows, bytes) for each table of a routed commit; none for another."""
    tables = ((commit or {}).get("details") or {}).get("tables") or {}
    return [
        [
            str(run_id),
            name,
            str(t.get("version", "")),
            t.get("rows_added", 0),
            t.get("bytes_added", 0),
        ]
        for name, t in sorted(tables.items())
    ]


def print_routed_tables(commits: Iterable[tuple[int | str, Mapping[str, Any] | None]]) -> None:
    rows = [row for run_id, commit in commits for row in table_rows(run_id, commit)]
    if rows:
        print_table(
            "rows per routed table",
            ["run", "table", "version", "rows", "bytes"],
            rows,
            justify="left",
        )
