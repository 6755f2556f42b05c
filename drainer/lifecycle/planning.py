"""Plan the next run from live state: Kafka watermarks, Postgres offsets and run history.

The I/O half of allocation (docs/allocation.md); the arithmetic is `drainer.allocation.plan`, which stays pure.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Engine

from drainer.allocation import PartitionBacklog, Plan, plan
from drainer.config import DrainConfig
from drainer.errors import TopicRecreated
from drainer.kafka import clients as kafka_io
from drainer.offset_map import PartitionProgress
from drainer.store import history, offsets
from drainer.store.retention import Loss

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionState:
    level: int
    partition: int
    low: int
    high: int  # where a plan may end: the last stable offset when reading committed records
    progress: PartitionProgress  # after skipping what retention deleted (`loss`)
    backlog: int
    stored: bool  # False: no progress in Postgres yet, starts from the earliest offset
    log_end: int = -1  # the log's end offset (high watermark)
    loss: Loss | None = None  # retention passed the stored committed offset: the skip to commit
    stored_committed: int | None = None  # what Postgres holds, when it differs (a loss)

    @property
    def committed(self) -> int:
        return self.progress.committed


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
        progress = stored.get((topic, part), PartitionProgress(wm.low))
        stored_committed, loss = progress.committed, None
        if progress.committed < wm.low:
            loss = skip_deleted(topic, level, part, progress, wm.low)
            assert loss.moved_to is not None  # a 'committed' loss says where it moves to
            progress = loss.moved_to
        found.append(
            PartitionState(
                level,
                part,
                wm.low,
                wm.high,
                progress,
                progress.pending_below(wm.high),
                (topic, part) in stored,
                wm.log_end,
                loss,
                None if loss is None else stored_committed,
            )
        )
    return found


def skip_deleted(
    topic: str, level: int, partition: int, stored: PartitionProgress, low: int
) -> Loss:
    """Retention deleted offsets below `low` that the drain had not committed: where to resume.

    The committed offset moves to `low`; done offsets at or above `low` stay in the map (they
    are never replayed), done ones below it were not lost. Committed together with the run.
    """
    return Loss(
        "committed",
        topic,
        level,
        partition,
        stored.committed,
        low,
        stored.pending_below(low),
        moved_from=stored,
        moved_to=stored.skipped_to(low),
    )


def check_offsets_exist(drain: DrainConfig, parts: list[PartitionState]) -> None:
    """A committed offset above the log's end: the topic was recreated (or truncated)."""
    for p in parts:
        if p.stored and p.committed > p.log_end:
            topic = drain.level_topic(p.level)
            raise TopicRecreated(
                f"{topic}[{p.partition}] ends at offset {p.log_end}, below the drain's committed "
                f"offset {p.committed}: the topic was deleted and created again (or truncated), "
                "so the stored progress belongs to records that no longer exist and nothing was "
                f"planned. Check what happened, then accept the topic as it is with `drainer "
                f"rewind {drain.name} --level {p.level} --to-earliest --reason TEXT`."
            )


def plan_next_run(
    engine: Engine, drain: DrainConfig, levels: list[int] | None = None
) -> PlannedRun:
    levels = resolve_levels(drain, levels)
    parts = partition_states(engine, drain, levels)
    check_offsets_exist(drain, parts)
    for p in parts:
        if p.loss is not None and p.loss.records:
            log.warning(
                "%s[%d]: offsets %d..%d were deleted by Kafka retention before they were "
                "drained (%d records lost); the plan starts at %d",
                p.loss.topic,
                p.partition,
                p.loss.first,
                p.loss.end - 1,
                p.loss.records,
                p.committed,
            )
    backlogs = [
        PartitionBacklog(
            level=p.level,
            partition=p.partition,
            start=p.committed,
            end=p.high,
            done=p.progress.done_below(p.high),
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
