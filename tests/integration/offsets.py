"""Where a drain's progress stands, read three ways: Kafka's end offsets, Postgres, the mirror."""

from __future__ import annotations

from sqlalchemy import text

from drainer.config import DrainConfig
from drainer.kafka_io import group_offsets, partitions_of, watermarks
from drainer.store import get_engine


def high_watermarks(drain: DrainConfig) -> dict[tuple[str, int], int]:
    marks = watermarks(drain, partitions_of(drain, range(drain.levels)))
    return {(drain.level_topic(level), p): wm.high for (level, p), wm in marks.items()}


def stored_offsets(drain: DrainConfig) -> dict[tuple[str, int], tuple[int, str]]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                "SELECT topic, partition, committed, offset_map FROM partition_offsets WHERE drain = :d"
            ),
            {"d": drain.name},
        )
        return {(r.topic, r.partition): (r.committed, r.offset_map) for r in rows}


def kafka_offsets(drain: DrainConfig) -> dict[tuple[str, int], tuple[int, str]]:
    """The mirror: each level's consumer group `{group}-{level}`, offset and metadata."""
    found = {}
    for level, parts in partitions_of(drain, range(drain.levels)).items():
        keys = [(drain.level_topic(level), p) for p in parts]
        found.update(group_offsets(drain, drain.level_group(level), keys))
    return found
