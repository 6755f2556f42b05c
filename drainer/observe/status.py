"""`drainer status`: where a drain stands, from Kafka and Postgres, without running anything."""

from __future__ import annotations

from typing import Any

from drainer.config import DrainConfig
from drainer.kafka.session import KafkaSession
from drainer.lifecycle.budgets import run_budget
from drainer.lifecycle.planning import allocation_policy, partition_states
from drainer.observe.drain_health import drain_health
from drainer.observe.health_rules import LevelHealth
from drainer.settings import Settings
from drainer.sinks import Sink, SinkCommit, sink_for
from drainer.sinks.routed import rows_per_table
from drainer.store import (
    dead_letters,
    get_engine,
    history,
    lost_offsets,
    route_tables,
    runs,
    upserts,
)


def drain_status(drain: DrainConfig, settings: Settings, recent: int = 10) -> dict[str, Any]:
    engine = get_engine(settings.database_url)
    sink = sink_for(drain.sink, settings, drain.name)
    levels = list(range(drain.levels))
    with KafkaSession(drain, settings) as kafka:
        parts = partition_states(engine, drain, levels, kafka)
        health = drain_health(drain, settings, parts, engine, kafka)
    with engine.connect() as conn:
        history_by_level = history.level_history(conn, drain.name, levels, drain.history_window)
        recent_runs = runs.recent_runs(conn, drain.name, recent)
        merged = upserts.runs_counts(conn, [r.id for r in recent_runs])
        routed = route_tables.runs_rows(conn, [r.id for r in recent_runs])
        dead = dead_letters.pending_dead_letters(conn, drain.name)
        dead_by_level = dead_letters.pending_by_level(conn, drain.name)
        lost_by_level = lost_offsets.total_lost(conn, drain.name)
        losses = lost_offsets.committed_losses(conn, drain.name)
        abandoned = runs.abandons(conn, drain.name)[:recent]
    # the budgets the next run would get, from history only (no Kafka sample)
    budget = run_budget(engine, drain, levels, [])
    policy = allocation_policy(drain, levels, history_by_level, budget=budget)
    reserved = policy.reserved()
    allocation = policy.history_allocation()
    bursting = {lvl for lvl in levels if allocation[lvl] > reserved[lvl]}
    eligible = policy.burst_eligible()
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
                "history": history_by_level[level],
                # offsets Kafka deleted before the drain read them, over its committed runs
                "lost_to_retention": lost_by_level.get(level, 0),
                # dead letters not retried yet (failed handlers, records that do not decode)
                "dead_letters": dead_by_level.get(level, 0),
                "health": health_report(health[level]),
                "partitions": [
                    {
                        "partition": p.partition,
                        "committed": p.committed,
                        "end": p.high,
                        "backlog": p.backlog,
                        "offset_map_chars": len(p.progress.encoded()),
                        # retention passed the committed offset: the next run skips these
                        "pending_retention_loss": None
                        if p.loss is None
                        else {
                            "first": p.loss.first,
                            "end": p.loss.end,
                            "records": p.loss.records,
                        },
                    }
                    for p in mine
                ],
            }
        )
    return {
        "drain": drain.name,
        "budget": drain.budget,
        "run_budget": budget.as_dict(),
        "sink": {
            "type": sink.kind,
            "location": sink.location(),
            "describe": sink.describe(),
            "commit_id": sink.capabilities.commit_id,
            "rows": sink.capabilities.rows,
        },
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
                # the whole slot (through commit, mirror, upkeep): what run_seconds measures
                "slot_s": r.slot_s,
                "drained": int(r.drained),
                "lost_to_retention": int(r.lost_to_retention),
                "error": r.error,
                "fill_ratios": {int(k): v for k, v in (r.fills or {}).items()},
                # a sink that commits first: format, location, its commit id (version, snapshot,
                # marker offset), bytes and rows added, files where it has them, details
                "table_commit": _shown(r.table_commit, sink),
                # a state table's merge: rows inserted, updated, deleted, skipped as older
                "upsert": _upsert_counts(merged.get(r.id), r.table_commit),
                # a routed sink: the rows the run wrote into each table
                "table_rows": rows_per_table(routed.get(r.id, {}), r.table_commit),
                # the sink table's columns the run added (new optional fields)
                "columns_added": list(r.columns_added or []),
            }
            for r in recent_runs
        ],
        "dead_letters": dead,
        "lost_to_retention": sum(lost_by_level.values()),
        "retention_losses": [
            {
                "run_id": x["run_id"],
                "kind": x["kind"],
                "topic": x["topic"],
                "level": x["level"],
                "partition": x["partition"],
                "first_offset": x["first_offset"],
                "end_offset": x["end_offset"],
                "records": int(x["records"]),
                "committed_at": x["committed_at"],
            }
            for x in losses
        ],
        "abandoned_plans": abandoned,
    }


def health_report(health: LevelHealth) -> dict[str, Any]:
    """A level's health for `status --json`: state by Burrow's rules, rates, ETA to empty.

    `eta_s` is null when the level grows (`eta` says "growing") or nothing tells yet
    ("unknown"); `oldest_age_s` is null when nothing waits.
    """

    def rounded(value: float | None, digits: int) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "state": health.state.value,
        "reason": health.reason,
        "oldest_age_s": rounded(health.oldest_age_s, 1),
        "arrival_rate": rounded(health.arrival_rate, 3),
        "drain_rate": rounded(health.drain_rate, 3),
        "eta_s": rounded(health.eta_s, 1),
        "eta": health.eta_text(),
    }


def _upsert_counts(
    stored: dict[str, Any] | None, commit: dict[str, Any] | None
) -> dict[str, int] | None:
    """A state table's merge counts: a Postgres sink's own record, or those a table commit
    carries (Delta, Iceberg); None for an append run."""
    if stored:
        return {k: int(v) for k, v in stored.items()}
    return ((commit or {}).get("details") or {}).get("upsert")


def _shown(stored: dict[str, Any] | None, sink: Sink[Any]) -> dict[str, Any] | None:
    """A recorded sink commit as the sink reports it (no files for a sink without them)."""
    commit = SinkCommit.from_dict(stored, sink.capabilities.files)
    return None if commit is None else commit.as_dict()
