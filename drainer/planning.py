"""Plan the next run from live state: Kafka watermarks, Postgres offsets and run history.

The I/O half of allocation (docs/allocation.md); the arithmetic is `drainer.allocation.plan`, which stays pure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Engine

from drainer import kafka_io
from drainer.allocation import PartitionBacklog, Plan, plan
from drainer.config import DrainConfig
from drainer.offset_map import decode_offset_map
from drainer.store import history, offsets

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionState:
    level: int
    partition: int
    low: int
    high: int
    committed: int
    offset_map: str
    backlog: int
    stored: bool  # False: no progress in Postgres yet, starts from the earliest offset


@dataclass(frozen=True)
class PlannedRun:
    plan: Plan
    partitions: list[PartitionState]
    levels: list[int]


def resolve_levels(drain: DrainConfig, levels: list[int] | None) -> list[int]:
    if not levels:
        return list(range(drain.levels))
    return sorted({drain.check_level(level) for level in levels})


def partition_states(engine: Engine, drain: DrainConfig, levels: list[int]) -> list[PartitionState]:
    """Where every partition of the covered levels stands: what Kafka has, what is done."""
    marks = kafka_io.watermarks(drain, kafka_io.partitions_of(drain, levels))
    with engine.connect() as conn:
        stored = offsets.partition_offsets(conn, drain.name)
    found = []
    for (level, part), wm in sorted(marks.items()):
        topic = drain.level_topic(level)
        committed, offset_map = stored.get((topic, part), (wm.low, ""))
        if committed < wm.low:
            log.error(
                "%s[%d]: offsets %d..%d were deleted by Kafka retention before they were drained; "
                "continuing from %d",
                topic,
                part,
                committed,
                wm.low - 1,
                wm.low,
            )
            committed, offset_map = wm.low, ""
        done = {o for o in decode_offset_map(committed, offset_map) if o < wm.high}
        backlog = max(0, wm.high - committed - len(done))
        found.append(
            PartitionState(
                level,
                part,
                wm.low,
                wm.high,
                committed,
                offset_map,
                backlog,
                (topic, part) in stored,
            )
        )
    return found


def plan_next_run(
    engine: Engine, drain: DrainConfig, levels: list[int] | None = None
) -> PlannedRun:
    levels = resolve_levels(drain, levels)
    parts = partition_states(engine, drain, levels)
    backlogs = [
        PartitionBacklog(
            level=p.level,
            partition=p.partition,
            start=p.committed,
            end=p.high,
            done=frozenset(o for o in decode_offset_map(p.committed, p.offset_map) if o < p.high),
        )
        for p in parts
    ]
    with engine.connect() as conn:
        level_history = history.level_history(conn, drain.name, levels, drain.history_window)
    lookups = {}
    if drain.max_gap_ms is not None:
        backlogs, lookups = _with_event_times(drain, backlogs)
    result = plan(
        backlogs,
        budget=drain.budget,
        levels=levels,
        distributor=drain.distributor,
        history=level_history,
        window=drain.history_window,
        maxout_threshold=drain.maxout_threshold,
        backlog_aware=drain.backlog_aware,
        max_gap_ms=drain.max_gap_ms,
        align=drain.align,
        **lookups,
    )
    return PlannedRun(result, parts, levels)


def _with_event_times(drain: DrainConfig, backlogs: list[PartitionBacklog]):
    """Attach next-pending timestamps (one batched read) and the lookups alignment needs.

    Always returns the lookups, even when nothing is pending: `plan` requires them whenever the
    drain has `max_gap`, and an empty backlog is an ordinary state, not an error. The planner
    caches its lookups; each is one Kafka request for one partition.
    """
    pending = {}
    for b in backlogs:
        if b.backlog > 0:
            first = b.start
            while first in b.done:
                first += 1
            pending[(b.level, b.partition)] = first
    stamps = kafka_io.record_timestamps(drain, pending)
    with_ts = [
        PartitionBacklog(
            b.level, b.partition, b.start, b.end, b.done, stamps.get((b.level, b.partition))
        )
        for b in backlogs
    ]
    ends = {(b.level, b.partition): b.end for b in backlogs}

    def offset_for_time(level: int, partition: int, ts: int) -> int:
        return kafka_io.offsets_for_time(drain, {(level, partition): ts}, ends)[(level, partition)]

    def timestamp_at(level: int, partition: int, offset: int) -> int | None:
        return kafka_io.record_timestamps(drain, {(level, partition): offset})[(level, partition)]

    return with_ts, {"offset_for_time": offset_for_time, "timestamp_at": timestamp_at}
