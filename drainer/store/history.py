"""What each level drained in recent runs: the input of burst decisions."""

from __future__ import annotations

from sqlalchemy import Connection, text


def level_history(
    conn: Connection, drain: str, levels: list[int], window: int
) -> dict[int, list[int]]:
    """Drained counts of each level in the last `window` committed runs that covered it.

    A run that did not cover a level (a backfill of other levels) is not part of that level's
    window: it says nothing about how much the level could use.
    """
    rows = conn.execute(
        text(
            "SELECT level, drained FROM ("
            "  SELECT rl.level, rl.drained, r.id,"
            "         row_number() OVER (PARTITION BY rl.level ORDER BY r.id DESC) AS n"
            "  FROM run_levels rl JOIN runs r ON r.id = rl.run_id"
            "  WHERE r.drain = :d AND r.status = 'committed' AND rl.level = ANY(:levels)"
            ") h WHERE n <= :w ORDER BY level, id"
        ),
        {"d": drain, "levels": levels, "w": window},
    )
    history: dict[int, list[int]] = {level: [] for level in levels}
    for row in rows:
        history[row.level].append(row.drained or 0)
    return history
