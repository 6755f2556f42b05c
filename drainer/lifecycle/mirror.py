"""Mirror Postgres's committed offsets to Kafka consumer groups (after the commit).

Postgres stays the source of truth; the mirror lets standard lag tools see the drain. Every
partition whose mirror lags behind Postgres is mirrored, so a failed mirror heals next run.

After a committed run, every partition of a level the run covered is committed again even when
its offset did not move, if the level still has records waiting: a level throttled on purpose
(its budget share used) then shows a fresh commit to lag monitors (Burrow calls a group whose
offsets stop while lag stays "stalled") rather than a dead consumer. A level the run left empty
has no lag to stall on (Burrow's first rule: any zero lag in the window is OK), so it is committed
again only once its last mirror is `REFRESH_S` old: often enough that Kafka never expires the
group's offsets (a group without members keeps them `offsets.retention.minutes`, 7 days by
default, after its last commit), and an empty run makes no Kafka round trip for it. The mirror never moves a group's offset
backwards: only an audited `drainer rewind` (which moves Postgres's committed offset below what
was mirrored) may; any other group offset ahead of Postgres is left alone and reported.

All levels' groups are committed in one batch on the session's admin client; they are read
with one request per level's group (`consumer_groups` says why not in one batch).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Row

from drainer.config import DrainConfig
from drainer.errors import KafkaUnavailable
from drainer.kafka.consumer_groups import GroupCommit
from drainer.kafka.session import KafkaSession
from drainer.offset_map import MAX_KAFKA_METADATA
from drainer.store import offsets

log = logging.getLogger(__name__)

REFRESH_S = 3600
"""An empty level's group offsets are committed again when their last mirror is this old."""


@dataclass
class MirrorReport:
    partitions: int = 0
    maps_dropped: int = 0
    # partitions whose group offset was ahead of Postgres without a rewind: left alone
    not_moved_back: int = 0
    error: str | None = None


def mirror_offsets(
    engine: Engine,
    drain: DrainConfig,
    kafka: KafkaSession,
    levels: list[int] | None = None,
    run_id: int | None = None,
) -> MirrorReport:
    """Mirror what lags behind Postgres; with `levels`, also every partition of those levels
    that run `run_id` left records waiting in, or that was last mirrored `REFRESH_S` ago."""
    report = MirrorReport()
    with engine.connect() as conn:
        rows = offsets.unmirrored(conn, drain.name, levels or [], run_id, REFRESH_S)
    # only the topics the drain reads now: a drain whose `topic` changed keeps the old topics'
    # offsets in Postgres, and one commit naming a deleted topic fails its whole group's batch
    # ("Unknown topic or partition"), every run, so lag tools saw the drain's group stuck
    current = {drain.level_topic(level) for level in range(drain.levels)}
    rows = [row for row in rows if row.topic in current]
    if not rows:
        return report
    rows = _not_backwards(drain, kafka, rows, report)
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
    failed = kafka.commit_group_offsets(
        {drain.level_group(level): commits for level, commits in by_level.items()}
    )
    mirrored: list[GroupCommit] = []
    for level, commits in by_level.items():
        err = failed.get(drain.level_group(level))
        if err is not None:
            report.error = str(err)
            log.warning(
                "mirroring offsets of group %s failed (%s); the next run retries",
                drain.level_group(level),
                err,
            )
            continue
        mirrored += commits
    if mirrored:
        with engine.begin() as conn:
            offsets.mark_mirrored(
                conn, drain.name, [(c.topic, c.partition, c.offset) for c in mirrored]
            )
    report.partitions = len(mirrored)
    return report


def _not_backwards(
    drain: DrainConfig, kafka: KafkaSession, rows: Sequence[Row[Any]], report: MirrorReport
) -> list[Row[Any]]:
    """Drop commits that would move a group's offset backwards without an audited rewind."""
    by_level: dict[int, list[Row[Any]]] = defaultdict(list)
    for row in rows:
        by_level[row.level].append(row)
    try:
        groups = kafka.group_offsets(
            {
                drain.level_group(level): [(r.topic, r.partition) for r in level_rows]
                for level, level_rows in by_level.items()
            }
        )
    except KafkaUnavailable:
        return list(rows)  # the commit below fails the same way and is retried
    kept = []
    for level, level_rows in by_level.items():
        current = groups[drain.level_group(level)]
        for row in level_rows:
            offset = current.get((row.topic, row.partition), (-1, ""))[0]
            if offset > row.committed and not row.rewound:
                report.not_moved_back += 1
                log.warning(
                    "%s[%d]: group %s is at offset %d, ahead of the drain's committed %d, and no "
                    "rewind explains it (another consumer of the group?); not moving it back",
                    row.topic,
                    row.partition,
                    drain.level_group(level),
                    offset,
                    row.committed,
                )
                continue
            kept.append(row)
    return kept
