"""The tables a routed sink writes (drainer.config.routing): registered per drain before a run
writes them, so a resumed run, the commit and `drainer maintain` know every one of them."""

from __future__ import annotations

from collections.abc import Iterable

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
