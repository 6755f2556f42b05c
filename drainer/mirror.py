"""Mirror Postgres's committed offsets to Kafka consumer groups (after the commit).

Postgres stays the source of truth; the mirror lets standard lag tools see the drain. Every
partition whose mirror lags behind Postgres is mirrored, so a failed mirror heals next run.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Engine

from drainer.config import DrainConfig
from drainer.errors import KafkaUnavailable
from drainer.kafka_io import GroupCommit, commit_group_offsets
from drainer.offset_map import MAX_KAFKA_METADATA
from drainer.store import offsets

log = logging.getLogger(__name__)


@dataclass
class MirrorReport:
    partitions: int = 0
    maps_dropped: int = 0
    error: str | None = None


def mirror_offsets(engine: Engine, drain: DrainConfig) -> MirrorReport:
    report = MirrorReport()
    with engine.connect() as conn:
        rows = offsets.unmirrored(conn, drain.name)
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
                offsets.mark_mirrored(conn, drain.name, c.topic, c.partition, c.offset)
        report.partitions += len(commits)
    return report
