"""`drainer status`: where a drain stands, from Kafka and Postgres, without running anything."""

from __future__ import annotations

from sqlalchemy import text

from drainer import state
from drainer.allocation import burst_allocation, reserved_shares
from drainer.config import DrainConfig
from drainer.db import get_engine
from drainer.planning import partition_states


def drain_status(drain: DrainConfig, recent: int = 10) -> dict:
    engine = get_engine()
    levels = list(range(drain.levels))
    parts = partition_states(engine, drain, levels)
    with engine.connect() as conn:
        history = state.level_history(conn, drain.name, levels, drain.history_window)
        runs = conn.execute(
            text(
                "SELECT r.id, r.status, r.levels, r.trigger, r.attempts, r.planned_at, r.duration_s, "
                "coalesce(sum(rl.drained), 0) AS drained, "
                "jsonb_object_agg(rl.level, rl.fill_ratio) FILTER (WHERE rl.level IS NOT NULL) AS fills "
                "FROM runs r LEFT JOIN run_levels rl ON rl.run_id = r.id WHERE r.drain = :d "
                "GROUP BY r.id ORDER BY r.id DESC LIMIT :n"
            ),
            {"d": drain.name, "n": recent},
        ).all()
        dead = conn.scalar(
            text("SELECT count(*) FROM dead_letters WHERE drain = :d AND retried_at IS NULL"),
            {"d": drain.name},
        )
    reserved = reserved_shares(levels, drain.budget, drain.distributor)
    allocation = burst_allocation(reserved, history, drain.history_window, drain.maxout_threshold)
    bursting = {lvl for lvl in levels if allocation[lvl] > reserved[lvl]}
    eligible = {
        lvl
        for lvl in levels
        if sum(1 for d in history[lvl][-drain.history_window :] if d >= reserved[lvl])
        >= drain.maxout_threshold
    }
    report_levels = []
    for level in reversed(levels):
        mine = [p for p in parts if p.level == level]
        report_levels.append(
            {
                "level": level,
                "topic": drain.level_topic(level),
                "backlog": sum(p.backlog for p in mine),
                "committed": sum(p.committed for p in mine),
                "end": sum(p.high for p in mine),
                "reserved": reserved[level],
                "next_allocation": allocation[level],
                "burst_eligible": level in eligible,
                "bursting": level in bursting,
                "history": history[level],
                "partitions": [
                    {
                        "partition": p.partition,
                        "committed": p.committed,
                        "end": p.high,
                        "backlog": p.backlog,
                        "offset_map_chars": len(p.offset_map),
                    }
                    for p in mine
                ],
            }
        )
    return {
        "drain": drain.name,
        "budget": drain.budget,
        "levels": report_levels,
        "runs": [
            {
                "id": r.id,
                "status": r.status,
                "levels": list(r.levels),
                "trigger": r.trigger,
                "attempts": r.attempts,
                "planned_at": r.planned_at,
                "duration_s": r.duration_s,
                "drained": int(r.drained),
                "fill_ratios": {int(k): v for k, v in (r.fills or {}).items()},
            }
            for r in runs
        ],
        "dead_letters": dead,
    }
