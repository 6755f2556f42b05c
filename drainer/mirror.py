"""Mirror Postgres's committed offsets to Kafka consumer groups (DESIGN §5, after the commit).

Postgres stays the source of truth; the mirror lets standard lag tools see the drain. Every
partition whose mirror lags behind Postgres is mirrored, so a failed mirror heals next run.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Engine, text

from drainer.config import DrainConfig
from drainer.kafka_io import GroupCommit, KafkaUnavailable, commit_group_offsets
from drainer.offset_map import MAX_KAFKA_METADATA

log = logging.getLogger(__name__)


@dataclass
class MirrorReport:
    partitions: int = 0
    maps_dropped: int = 0
    error: str | None = None


def mirror_offsets(engine: Engine, drain: DrainConfig) -> MirrorReport:
    report = MirrorReport()
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT topic, level, partition, committed, offset_map FROM partition_offsets "
                "WHERE drain = :d AND (mirrored_offset IS DISTINCT FROM committed "
                "OR mirrored_map IS DISTINCT FROM offset_map)"
            ),
            {"d": drain.name},
        ).all()
    by_level: dict[int, list[GroupCommit]] = defaultdict(list)
    for row in rows:
        metadata = row.offset_map
        if len(metadata) > MAX_KAFKA_METADATA:
            report.maps_dropped += 1
            log.warning(
                "%s[%d]: offset map of %d characters exceeds Kafka's %d-character commit "
                "metadata; mirrored the offset without it (Postgres keeps the full map)",
                row.topic,
                row.partition,
                len(metadata),
                MAX_KAFKA_METADATA,
            )
            metadata = ""
        by_level[row.level].append(GroupCommit(row.topic, row.partition, row.committed, metadata))
    for level, commits in by_level.items():
        try:
            commit_group_offsets(drain, drain.level_group(level), commits)
        except KafkaUnavailable as err:
            report.error = str(err)
            log.warning(
                "mirroring offsets of group %s failed (%s); the next run retries",
                drain.level_group(level),
                err,
            )
            continue
        with engine.begin() as conn:
            for c in commits:
                conn.execute(
                    text(
                        "UPDATE partition_offsets SET mirrored_offset = :c, mirrored_map = offset_map "
                        "WHERE drain = :d AND topic = :t AND partition = :p AND committed = :c"
                    ),
                    {"c": c.offset, "d": drain.name, "t": c.topic, "p": c.partition},
                )
        report.partitions += len(commits)
    return report
