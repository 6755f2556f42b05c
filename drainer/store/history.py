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
    # per level, walk the drain's committed runs newest first (an index) and stop at the
    # window, looking each one's level up by key: flat in the drain's history length. The
    # lookup is a subquery so that no plan (psycopg prepares repeated statements, and a
    # generic plan knows neither the drain nor the window) can hash all of run_levels.
    rows = conn.execute(
        text(
            "SELECT l.level, h.drained FROM unnest(CAST(:levels AS int[])) AS l(level) "
            "CROSS JOIN LATERAL ("
            "  SELECT r.id, (SELECT rl.drained FROM run_levels rl "
            "                WHERE rl.run_id = r.id AND rl.level = l.level) AS drained "
            "  FROM runs r WHERE r.drain = :d AND r.status = 'committed' "
            "  AND l.level = ANY(r.levels) ORDER BY r.id DESC LIMIT :w"
            ") h ORDER BY l.level, h.id"
        ),
        {"d": drain, "levels": levels, "w": window},
    )
    history: dict[int, list[int]] = {level: [] for level in levels}
    for row in rows:
        history[row.level].append(row.drained or 0)
    return history
