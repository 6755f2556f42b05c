"""What each level drained in recent runs: the input of burst decisions and of level health."""

from __future__ import annotations

from typing import NamedTuple

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


class LevelRun(NamedTuple):
    """One committed run as one level saw it, in plain values."""

    committed_at: float  # seconds since the epoch
    backlog_before: int
    drained: int
    backlog_after: int


def level_runs(
    conn: Connection, drain: str, levels: list[int], window: int
) -> dict[int, list[LevelRun]]:
    """The last `window` committed runs that covered each level, oldest first.

    Like `level_history`, a backfill of other levels is not in a level's window. A run whose
    backlog lookup after the commit failed has no `backlog_after`: what it left of the
    backlog it planned against stands in for it.
    """
    rows = conn.execute(
        text(
            "SELECT level, committed_at, backlog_before, drained, backlog_after FROM ("
            "  SELECT rl.level, r.id, extract(epoch FROM r.committed_at)::float AS committed_at,"
            "         rl.backlog_before, coalesce(rl.drained, 0) AS drained,"
            "         coalesce(rl.backlog_after,"
            "                  greatest(rl.backlog_before - coalesce(rl.drained, 0), 0))"
            "           AS backlog_after,"
            "         row_number() OVER (PARTITION BY rl.level ORDER BY r.id DESC) AS n"
            "  FROM run_levels rl JOIN runs r ON r.id = rl.run_id"
            "  WHERE r.drain = :d AND r.status = 'committed' AND rl.level = ANY(:levels)"
            ") h WHERE n <= :w ORDER BY level, id"
        ),
        {"d": drain, "levels": levels, "w": window},
    )
    found: dict[int, list[LevelRun]] = {level: [] for level in levels}
    for row in rows:
        found[row.level].append(
            LevelRun(
                float(row.committed_at),
                int(row.backlog_before),
                int(row.drained),
                int(row.backlog_after),
            )
        )
    return found
