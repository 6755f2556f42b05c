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
    # window, then fetch those runs' levels by key: flat in the drain's history length
    rows = conn.execute(
        text(
            "SELECT l.level, rl.drained FROM unnest(CAST(:levels AS int[])) AS l(level) "
            "CROSS JOIN LATERAL ("
            "  SELECT r.id FROM runs r WHERE r.drain = :d AND r.status = 'committed' "
            "  AND l.level = ANY(r.levels) ORDER BY r.id DESC LIMIT :w"
            ") h JOIN run_levels rl ON rl.run_id = h.id AND rl.level = l.level "
            "ORDER BY l.level, h.id"
        ),
        {"d": drain, "levels": levels, "w": window},
    )
    history: dict[int, list[int]] = {level: [] for level in levels}
    for row in rows:
        history[row.level].append(row.drained or 0)
    return history
