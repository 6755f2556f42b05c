"""Plan the next run from live state: Kafka watermarks, Postgres offsets and run history.

The I/O half of allocation (docs/allocation.md): the arithmetic is `drainer.allocation`'s
`AllocationPolicy`, which stays pure; `allocation_policy` builds it from a drain's settings.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from sqlalchemy import Engine

from drainer.allocation import AllocationPolicy, OffsetForTime, PartitionBacklog, Plan, TimestampAt
from drainer.config import DrainConfig
from drainer.errors import TopicRecreated
from drainer.kafka.session import KafkaSession
from drainer.lifecycle.budgets import RunBudget, run_budget
from drainer.offset_map import PartitionProgress
from drainer.store import history, offsets
from drainer.store.lost_offsets import Loss

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
    budget: RunBudget | None = None  # the budgets the plan was made with (None: `budget`)


def resolve_levels(drain: DrainConfig, levels: list[int] | None) -> list[int]:
    if not levels:
        return list(range(drain.levels))
    return sorted({drain.check_level(level) for level in levels})


def partition_states(
    engine: Engine, drain: DrainConfig, levels: list[int], kafka: KafkaSession
) -> list[PartitionState]:
    """Where every partition of the covered levels stands: what Kafka has, what is done.

    A level topic that does not exist is one TopicMissing naming it and `drainer topics create`.
    """
    marks = kafka.watermarks(kafka.partitions(levels))
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
    engine: Engine, drain: DrainConfig, kafka: KafkaSession, levels: list[int] | None = None
) -> PlannedRun:
    levels = resolve_levels(drain, levels)
    parts = partition_states(engine, drain, levels, kafka)
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
    lookups: EventTimeLookups | None = None
    if drain.max_gap_ms is not None or drain.max_wait_ms:
        backlogs, lookups = _with_event_times(drain, kafka, backlogs)
    budget = run_budget(engine, drain, levels, backlogs, kafka)
    result = allocation_policy(drain, levels, level_history, lookups, budget).plan(backlogs)
    return PlannedRun(result, parts, levels, budget)


@dataclass(frozen=True)
class EventTimeLookups:
    """The Kafka lookups event-time alignment and `max_wait` ask the policy to make, one
    partition each, and the wall clock (ms) that record ages are measured against."""

    offset_for_time: OffsetForTime
    timestamp_at: TimestampAt
    now_ms: int


def allocation_policy(
    drain: DrainConfig,
    levels: list[int],
    level_history: dict[int, list[int]],
    lookups: EventTimeLookups | None = None,
    budget: RunBudget | None = None,
) -> AllocationPolicy:
    """The drain's allocation policy for a run over `levels`, from its settings and history.

    Event-time alignment and `max_wait` need the Kafka lookups: without them (`drainer
    status`, which asks only for shares and burst) the policy is built with both off.
    `budget` (`run_seconds`, `budget_bytes`) replaces the configured `budget` and adds the
    byte budget; without it the policy has the configured budget and no byte rule.
    """
    return AllocationPolicy(
        budget=drain.budget if budget is None else budget.budget,
        levels=levels,
        distributor=drain.distributor,
        history=level_history,
        window=drain.history_window,
        maxout_threshold=drain.maxout_threshold,
        backlog_aware=drain.backlog_aware,
        max_gap_ms=None if lookups is None else drain.max_gap_ms,
        align=drain.align,
        offset_for_time=None if lookups is None else lookups.offset_for_time,
        timestamp_at=None if lookups is None else lookups.timestamp_at,
        max_wait_ms=None if lookups is None else drain.max_wait_ms,
        now_ms=None if lookups is None else lookups.now_ms,
        budget_bytes=None if budget is None else budget.budget_bytes,
        record_bytes=None if budget is None else budget.record_bytes,
    )


def _with_event_times(
    drain: DrainConfig, kafka: KafkaSession, backlogs: list[PartitionBacklog]
) -> tuple[list[PartitionBacklog], EventTimeLookups]:
    """Attach next-pending timestamps (one batched read) and the lookups the policy needs.

    Always returns the lookups, even when nothing is pending: the policy requires them whenever
    the drain has `max_gap` or `max_wait`, and an empty backlog is an ordinary state, not an
    error. Each lookup is one Kafka request for one partition, except the offsets at
    `now - max_wait` of the partitions with records that old, which are read in one request
    here.
    """
    pending = {}
    for b in backlogs:
        if b.backlog > 0:
            first = b.start
            while first in b.done:
                first += 1
            pending[(b.level, b.partition)] = first
    stamps = kafka.record_timestamps(pending)
    with_ts = [
        PartitionBacklog(
            b.level, b.partition, b.start, b.end, b.done, stamps.get((b.level, b.partition))
        )
        for b in backlogs
    ]
    ends = {(b.level, b.partition): b.end for b in backlogs}
    now_ms = int(time.time() * 1000)
    limits = drain.max_wait_ms or {}
    cutoffs = {
        (b.level, b.partition): now_ms - limits[b.level]
        for b in with_ts
        if b.level in limits
        and b.backlog > 0
        and (b.next_timestamp is None or b.next_timestamp < now_ms - limits[b.level])
    }
    known = {
        (*key, cutoffs[key]): offset
        for key, offset in kafka.offsets_for_time(cutoffs, ends).items()
    }

    def offset_for_time(level: int, partition: int, ts: int) -> int:
        if (level, partition, ts) in known:
            return known[(level, partition, ts)]
        return kafka.offsets_for_time({(level, partition): ts}, ends)[(level, partition)]

    def timestamp_at(level: int, partition: int, offset: int) -> int | None:
        return kafka.record_timestamps({(level, partition): offset})[(level, partition)]

    return with_ts, EventTimeLookups(offset_for_time, timestamp_at, now_ms)
