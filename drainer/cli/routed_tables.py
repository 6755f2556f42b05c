"""A routed sink's rows per table in a run (drainer.sinks.routed): one row per table, for
`drainer run` and `drainer status`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from drainer.cli.output import print_table


def table_rows(
    run_id: int | str, commit: Mapping[str, Any] | None, rows: Mapping[str, int]
) -> list[list[Any]]:
    """(run, table, version, rows, bytes) for each table of a routed run; none for another.
    A Postgres sink's tables have no commit of their own: no version or bytes."""
    tables = ((commit or {}).get("details") or {}).get("tables") or {}
    return [
        [
            str(run_id),
            name,
            str(tables.get(name, {}).get("version", "-")),
            count,
            tables.get(name, {}).get("bytes_added", "-"),
        ]
        for name, count in sorted(rows.items())
    ]


def print_routed_tables(
    runs: Iterable[tuple[int | str, Mapping[str, Any] | None, Mapping[str, int]]],
) -> None:
    """The rows per table of each (run id, table commit, rows per table), if any is routed."""
    rows = [
        row for run_id, commit, per_table in runs for row in table_rows(run_id, commit, per_table)
    ]
    if rows:
        print_table(
            "rows per routed table",
            ["run", "table", "version", "rows", "bytes"],
            rows,
            justify="left",
        )
