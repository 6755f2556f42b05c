"""Each level's health now: its recent runs from Postgres, its backlog and oldest waiting record
from Kafka, judged by the pure rules of `drainer.observe.health_rules`.

Shared by `drainer status` and the Dagster asset (metadata and the `level_health` check), so
both show the same numbers for the same moment.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

from sqlalchemy import Engine

from drainer.config import DrainConfig
from drainer.kafka.session import KafkaSession
from drainer.lifecycle.planning import PartitionState, partition_states
from drainer.observe.health_rules import LevelHealth, RunSample, level_health
from drainer.settings import Settings
from drainer.store import get_engine, history


def drain_health(
    drain: DrainConfig,
    settings: Settings,
    parts: list[PartitionState] | None = None,
    engine: Engine | None = None,
    kafka: KafkaSession | None = None,
) -> dict[int, LevelHealth]:
    """Every level's health; `parts` (from `partition_states`) spares a second Kafka lookup.

    The window is the drain's `history_window` committed runs that covered the level, the same
    runs its burst decisions look at. Without a `kafka` session, one is opened for the call.
    """
    engine = engine or get_engine(settings.database_url)
    levels = list(range(drain.levels))
    with ExitStack() as stack:
        if kafka is None:
            kafka = stack.enter_context(KafkaSession(drain, settings))
        if parts is None:
            parts = partition_states(engine, drain, levels, kafka)
        oldest = oldest_timestamps(kafka, parts)
    with engine.connect() as conn:
        recent = history.level_runs(conn, drain.name, levels, drain.history_window)
    now = time.time()
    waits = drain.max_wait_ms or {}
    return {
        level: level_health(
            level,
            [RunSample(*run) for run in recent[level]],
            sum(p.backlog for p in parts if p.level == level),
            now,
            oldest.get(level),
            # a drain run by hand has no rhythm to judge by: its own max_wait instead
            scheduled=drain.schedule is not None,
            max_wait_s=None if waits.get(level) is None else waits[level] / 1000,
        )
        for level in levels
    }


def oldest_timestamps(kafka: KafkaSession, parts: list[PartitionState]) -> dict[int, float]:
    """Kafka timestamp (s) of each level's oldest waiting record: the first pending one of each
    partition (the committed offset, past offsets the offset map has done), min over the level.

    Levels with nothing waiting, or whose records carry no timestamp, are absent.
    """
    first = {(p.level, p.partition): _first_pending(p) for p in parts if p.backlog > 0}
    oldest: dict[int, float] = {}
    for (level, _), stamp_ms in kafka.record_timestamps(first).items():
        if stamp_ms is not None:
            oldest[level] = min(oldest.get(level, stamp_ms / 1000), stamp_ms / 1000)
    return oldest


def _first_pending(part: PartitionState) -> int:
    """The partition's first offset not done: its committed offset, past the map's done ones."""
    return part.progress.first_pending()
