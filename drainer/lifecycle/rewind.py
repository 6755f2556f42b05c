"""Move a level's committed offsets to an offset or a point in time, with an audit trail.

For reprocessing after a processor fix (backwards), skipping a bad stretch (forwards), or
accepting a topic that was deleted and created again (`--to-earliest`; the rewind records the
topic's new id, drainer.lifecycle.topic_identity). It
takes the drain's lease, so it never races a run, and refuses while a plan is uncommitted: that
plan must finish first, or its compare-and-set commit would fail anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from drainer.config import DrainConfig
from drainer.errors import ConfigError
from drainer.kafka.session import KafkaSession
from drainer.lifecycle.mirror import mirror_offsets
from drainer.offset_map import PartitionProgress
from drainer.settings import Settings
from drainer.store import dead_letters, get_engine, offsets, runs, topics
from drainer.store.leases import check_fence, drain_lease


@dataclass(frozen=True)
class Moved:
    topic: str
    partition: int
    from_offset: int
    to_offset: int


def rewind(
    drain: DrainConfig,
    level: int,
    to_offset: int | None = None,
    to_time: datetime | None = None,
    partitions: list[int] | None = None,
    reason: str | None = None,
    to_earliest: bool = False,
    *,
    settings: Settings,
) -> list[Moved]:
    """Move the level's committed offsets; every rewind also accepts the topic's current id.

    `to_earliest` moves them to the first offset Kafka still has: the way forward after a
    topic was deleted and created again (`TopicRecreated`).
    """
    drain.check_level(level)
    if sum((to_offset is not None, to_time is not None, to_earliest)) != 1:
        raise ConfigError("give exactly one of --to-offset, --to-time or --to-earliest")
    engine = get_engine(settings.database_url)
    with KafkaSession(drain, settings) as kafka:  # one set of clients for the whole command
        parts = kafka.partitions([level])[level]
        if partitions:
            unknown = sorted(set(partitions) - set(parts))
            if unknown:
                raise ConfigError(
                    f"{drain.level_topic(level)} has partitions {parts}; not {unknown}"
                )
            parts = sorted(partitions)
        marks = kafka.watermarks({level: parts})
        if to_time is not None:
            ends = {key: wm.high for key, wm in marks.items()}
            ms = int(to_time.timestamp() * 1000)
            targets = kafka.offsets_for_time({key: ms for key in ends}, ends)
        elif to_earliest:
            targets = {key: wm.low for key, wm in marks.items()}
        else:
            assert to_offset is not None  # exactly one target was checked above
            offset = to_offset
            targets = {key: min(max(offset, wm.low), wm.high) for key, wm in marks.items()}
        topic = drain.level_topic(level)
        topic_id = kafka.topic_ids([topic])[topic]
        moved: list[Moved] = []
        with drain_lease(engine, drain.row()) as lease, engine.begin() as conn:
            check_fence(conn, lease)
            open_run = runs.open_run(conn, drain.name)
            if open_run is not None:
                raise ConfigError(
                    f"run {open_run.id} of drain '{drain.name}' is not committed yet: finish it with "
                    f"`drainer run {drain.name}`, or end it with `drainer plan abandon {drain.name} "
                    "--reason TEXT`, before rewinding"
                )
            stored = offsets.partition_offsets(conn, drain.name)
            for (lvl, part), target in sorted(targets.items()):
                topic = drain.level_topic(lvl)
                current = stored.get((topic, part), PartitionProgress(marks[(lvl, part)].low))
                offsets.rewind_partition(
                    conn, drain.name, topic, part, current, target, reason, topic_id
                )
                dead_letters.forget_attempts_from(conn, drain.name, topic, part, target)
                moved.append(Moved(topic, part, current.committed, target))
            topics.record_topic_id(conn, drain.name, topic, topic_id)
        mirror_offsets(engine, drain, kafka)
    return moved
