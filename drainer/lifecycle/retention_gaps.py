"""Kafka retention inside a plan: what still exists of a run's ranges, and what was deleted.

A plan is stored before anything is read, and an uncommitted one is resumed, sometimes much
later; by then retention may have deleted the start of its ranges. Just before each attempt
reads, the run measures every range against the partition's earliest offset: the deleted part
is recorded as lost (per run, level and partition), the read starts at the earliest offset
that still exists, and the commit still moves the partition to the range's end. Spark keeps
`failOnDataLoss=true`, so records deleted *while* the attempt reads fail that attempt instead
of vanishing silently; the next attempt measures again.

Retention below the committed offset is found when planning (`drainer.lifecycle.planning.skip_deleted`).
"""

from __future__ import annotations

import logging
from collections import defaultdict

from drainer.config import DrainConfig
from drainer.errors import TopicRecreated
from drainer.kafka.session import KafkaSession
from drainer.store.lost_offsets import Loss
from drainer.store.runs import StoredRange

log = logging.getLogger(__name__)


def measure_ranges(
    drain: DrainConfig, ranges: list[StoredRange], kafka: KafkaSession
) -> tuple[list[Loss], dict[tuple[str, int], int]]:
    """The lost part of each range and where each range's read starts: (losses, read_from).

    A range whose end lies past the log's end belongs to a topic that was recreated: an error,
    never a silent skip.
    """
    if not ranges:
        return [], {}
    partitions: dict[int, list[int]] = defaultdict(list)
    for rng in ranges:
        partitions[rng.level].append(rng.partition)
    marks = kafka.watermarks(partitions)
    losses: list[Loss] = []
    read_from: dict[tuple[str, int], int] = {}
    for rng in ranges:
        wm = marks[(rng.level, rng.partition)]
        if rng.end > wm.log_end:
            raise TopicRecreated(
                f"{rng.topic}[{rng.partition}] ends at offset {wm.log_end}, but the open plan "
                f"reads up to {rng.end}: the topic was deleted and created again (or truncated). "
                f"End the plan with `drainer plan abandon {drain.name} --reason TEXT`, then "
                f"accept the topic with `drainer rewind {drain.name} --level {rng.level} "
                "--to-earliest --reason TEXT`."
            )
        start = max(rng.start, wm.low)
        read_from[(rng.topic, rng.partition)] = min(start, rng.end)
        if start == rng.start:
            continue
        cut = min(wm.low, rng.end)
        lost = rng.start_progress().pending_below(cut)
        losses.append(Loss("plan", rng.topic, rng.level, rng.partition, rng.start, cut, lost))
        log.warning(
            "%s[%d]: offsets %d..%d of the planned range %d..%d were deleted by Kafka retention "
            "before they were read (%d offsets lost); reading from %d",
            rng.topic,
            rng.partition,
            rng.start,
            cut - 1,
            rng.start,
            rng.end - 1,
            lost,
            min(start, rng.end),
        )
    return losses, read_from
