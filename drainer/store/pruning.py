"""History retention: run detail older than a drain's `history_days`, pruned to per-day totals.

What may go: committed or abandoned runs older than the cut-off (their levels, ranges and
retention losses go with them, `ON DELETE CASCADE`), except the newest `history_window`
committed runs of each level (burst decisions read them) and, being open, the drain's next
plan. What pruned runs did is added to `run_totals` (drain, day, level) in the transaction
that deletes them, so a total counts each run once. Also pruned: dead letters older than the
cut-off that are already on the DLQ topic or were retried, and attempt counts of records the
committed offset has passed. Kept: offsets, open plans, dead letters nobody has handled, the
audit trails (`plan_abandons`, `offset_rewinds`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

PRUNE_INTERVAL = "1 hour"  # how often upkeep after a commit prunes


def claim_hourly(conn: Connection, drain: str) -> bool:
    """True (and the drain marked) when its history was not pruned in the last hour."""
    return (
        conn.scalar(
            text(
                "UPDATE drains SET history_pruned_at = now() WHERE name = :d "
                "AND (history_pruned_at IS NULL "
                f"OR history_pruned_at <= now() - interval '{PRUNE_INTERVAL}') RETURNING 1"
            ),
            {"d": drain},
        )
        is not None
    )


def prunable_runs(conn: Connection, drain: str, days: int, window: int, limit: int) -> list[int]:
    """Up to `limit` ids of the oldest runs that may go (see the module docstring)."""
    return list(
        conn.execute(
            text(
                # the burst window of each level: its newest committed runs (index walks)
                "WITH keep AS (SELECT w.id FROM generate_series(0, ("
                "  SELECT levels - 1 FROM drains WHERE name = :d)) AS l(level) "
                "  CROSS JOIN LATERAL (SELECT r.id FROM runs r WHERE r.drain = :d "
                "    AND r.status = 'committed' AND l.level = ANY(r.levels) "
                "    ORDER BY r.id DESC LIMIT :w) w) "
                "SELECT id FROM runs WHERE drain = :d AND status IN ('committed', 'abandoned') "
                "AND coalesce(committed_at, planned_at) < now() - make_interval(days => CAST(:days AS int)) "
                "AND id NOT IN (SELECT id FROM keep) "
                "ORDER BY id LIMIT :n"
            ),
            {"d": drain, "days": days, "w": window, "n": limit},
        ).scalars()
    )


def prune_runs(conn: Connection, run_ids: list[int]) -> int:
    """Add the runs' levels to `run_totals`, then delete the runs with their detail."""
    if not run_ids:
        return 0
    conn.execute(
        text(
            "INSERT INTO run_totals (drain, day, level, runs, planned, drained, failed, "
            "dead_lettered, lost_to_retention) "
            "SELECT r.drain, (coalesce(r.committed_at, r.planned_at) AT TIME ZONE 'UTC')::date, "
            "rl.level, count(*), sum(rl.planned), coalesce(sum(rl.drained), 0), "
            "coalesce(sum(rl.failed), 0), coalesce(sum(rl.dead_lettered), 0), "
            "coalesce(sum(rl.lost_to_retention), 0) "
            "FROM runs r JOIN run_levels rl ON rl.run_id = r.id "
            "WHERE r.id = ANY(:ids) AND r.status = 'committed' GROUP BY 1, 2, 3 "
            "ON CONFLICT (drain, day, level) DO UPDATE SET "
            "runs = run_totals.runs + excluded.runs, "
            "planned = run_totals.planned + excluded.planned, "
            "drained = run_totals.drained + excluded.drained, "
            "failed = run_totals.failed + excluded.failed, "
            "dead_lettered = run_totals.dead_lettered + excluded.dead_lettered, "
            "lost_to_retention = run_totals.lost_to_retention + excluded.lost_to_retention"
        ),
        {"ids": run_ids},
    )
    return conn.execute(text("DELETE FROM runs WHERE id = ANY(:ids)"), {"ids": run_ids}).rowcount


def prune_dead_letters(conn: Connection, drain: str, days: int) -> int:
    """Delete old dead letters that were retried already, or are on the DLQ topic and not
    waiting for a retry (`dlq retry` asked for: the drain's next run of their level needs them)."""
    return conn.execute(
        text(
            "DELETE FROM dead_letters WHERE drain = :d "
            "AND created_at < now() - make_interval(days => CAST(:days AS int)) "
            "AND (retried_at IS NOT NULL "
            "OR (dlq_published_at IS NOT NULL AND retry_requested_at IS NULL))"
        ),
        {"d": drain, "days": days},
    ).rowcount


def prune_attempts(conn: Connection, drain: str, days: int) -> int:
    """Delete old attempt counts of records below their partition's committed offset (done)."""
    return conn.execute(
        text(
            "DELETE FROM record_attempts a USING partition_offsets p "
            "WHERE a.drain = :d AND p.drain = a.drain AND p.topic = a.topic "
            'AND p.partition = a.partition AND a."offset" < p.committed '
            "AND a.updated_at < now() - make_interval(days => CAST(:days AS int))"
        ),
        {"d": drain, "days": days},
    ).rowcount


def totals(conn: Connection, drain: str) -> list[dict[str, Any]]:
    """The drain's pruned totals per level (all days), highest level first."""
    rows = conn.execute(
        text(
            "SELECT level, sum(runs) AS runs, sum(drained) AS drained, "
            "sum(dead_lettered) AS dead_lettered, min(day) AS since FROM run_totals "
            "WHERE drain = :d GROUP BY level ORDER BY level DESC"
        ),
        {"d": drain},
    ).mappings()
    return [dict(row) for row in rows]
