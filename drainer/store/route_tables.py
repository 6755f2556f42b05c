"""The tables a routed sink writes (drainer.config.routing): registered per drain before a run
writes them, so a resumed run, the commit and `drainer maintain` know every one of them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import Connection, text


def registered(conn: Connection, drain: str) -> list[str]:
    """The drain's routed tables (names or Delta paths as its sink gives them), sorted."""
    rows = conn.execute(
        text("SELECT name FROM route_tables WHERE drain = :d ORDER BY name"), {"d": drain}
    )
    return [r[0] for r in rows]


def register(conn: Connection, drain: str, names: Iterable[str], run_id: int) -> None:
    """Record `names` as the drain's tables (a name already there keeps its first run)."""
    params = [{"d": drain, "n": n, "r": run_id} for n in names]
    if params:
        conn.execute(
            text(
                "INSERT INTO route_tables (drain, name, first_run_id) VALUES (:d, :n, :r) "
                "ON CONFLICT (drain, name) DO NOTHING"
            ),
            params,
        )


def store_rows(conn: Connection, run_id: int, rows: Mapping[str, int]) -> None:
    """Record the rows a Postgres commit published into each routed table, inside that commit's
    transaction (migration 025); a table the run gave no rows is left out."""
    params = [{"r": run_id, "t": name, "n": n} for name, n in rows.items() if n]
    if params:
        conn.execute(
            text(
                "INSERT INTO run_table_rows (run_id, table_name, rows) VALUES (:r, :t, :n) "
                "ON CONFLICT (run_id, table_name) DO NOTHING"
            ),
            params,
        )


def runs_rows(conn: Connection, run_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """Rows per routed table of those of `run_ids` a Postgres sink committed."""
    found: dict[int, dict[str, int]] = {}
    rows = conn.execute(
        text("SELECT run_id, table_name, rows FROM run_table_rows WHERE run_id = ANY(:r)"),
        {"r": list(run_ids)},
    )
    for r in rows:
        found.setdefault(r.run_id, {})[r.table_name] = int(r.rows)
    return found
