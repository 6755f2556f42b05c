"""Reading a few records at given offsets: their timestamps and their sizes.

Planning needs them without draining anything: the oldest pending record's age (`max_wait`,
level health), event-time alignment, and record sizes for a byte budget when no run has measured
them yet. One group-less consumer of the run's session does all of it, assigned per lookup.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, Message, TopicPartition

from drainer.kafka.clients import TIMEOUT_S, kafka_error

TopicOf = Callable[[int], str]  # a level's topic name


def record_timestamps(
    consumer: Consumer, topic_of: TopicOf, positions: Mapping[tuple[int, int], int]
) -> dict[tuple[int, int], int | None]:
    """Timestamp (ms) of the record at each (level, partition) offset: the next pending one.

    Reads one record per partition. At the end, or without a usable timestamp (old message
    format), it is unknown (None).
    """
    found: dict[tuple[int, int], int | None] = dict.fromkeys(positions)

    def take(level_partition: tuple[int, int], message: Message | None) -> bool:
        if message is not None:
            kind, stamp = message.timestamp()
            known = kind != TIMESTAMP_NOT_AVAILABLE and stamp >= 0
            found[level_partition] = stamp if known else None
        return True

    read_at(consumer, topic_of, positions, take)
    return found


def sample_record_sizes(
    consumer: Consumer,
    topic_of: TopicOf,
    positions: Mapping[tuple[int, int], int],
    count: int = 20,
) -> dict[tuple[int, int], float]:
    """Average key+value+header bytes of up to `count` records from each (level, partition)
    offset, as the Spark job measures a run's reads (`spark_jobs.kafka_source.record_bytes`).

    A byte budget's estimate for partitions no measured run has read yet (`budget_bytes`); a
    partition whose sample found no record is absent. Records, not batch headers: neither
    confluent-kafka's `Message` nor librdkafka's statistics (per partition only running
    `rxmsgs`/`rxbytes` counters, emitted on a timer) expose a record batch's size and record
    count, and the consumer fetches whole batches anyway, so reading `count` records costs
    about one fetch per partition either way.
    """
    sizes: dict[tuple[int, int], list[int]] = {key: [] for key in positions}

    def take(level_partition: tuple[int, int], message: Message | None) -> bool:
        if message is None:
            return True
        found = sizes[level_partition]
        found.append(message_bytes(message))
        return len(found) >= count

    read_at(consumer, topic_of, positions, take)
    return {key: sum(found) / len(found) for key, found in sizes.items() if found}


def message_bytes(message: Message) -> int:
    """A record's key, value and header bytes (header keys as UTF-8)."""
    size = len(message.key() or b"") + len(message.value() or b"")
    found = message.headers() or []
    for key, value in found.items() if isinstance(found, dict) else found:
        size += len(key.encode()) + len(value.encode() if isinstance(value, str) else value or b"")
    return size


def read_at(
    consumer: Consumer,
    topic_of: TopicOf,
    positions: Mapping[tuple[int, int], int],
    take: Callable[[tuple[int, int], Message | None], bool],
) -> None:
    """Hand the records from each (level, partition) offset to `take` (None: the partition's
    end) until it returns True for that partition, or the time is up."""
    if not positions:
        return
    assigned = [TopicPartition(topic_of(lvl), p, off) for (lvl, p), off in positions.items()]
    consumer.assign(assigned)
    try:
        wanted = {(topic_of(lvl), p): (lvl, p) for (lvl, p) in positions}
        deadline = time.monotonic() + TIMEOUT_S
        while wanted and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            key = (str(message.topic()), int(message.partition() or 0))
            if key not in wanted:
                continue
            error = message.error()
            if error is None and (message.offset() or 0) < positions[wanted[key]]:
                continue  # fetched before this lookup's assignment: not an asked record
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise kafka_error(f"reading {key[0]}[{key[1]}]: {error.str()}", error)
            if take(wanted[key], None if error is not None else message):
                wanted.pop(key)
                consumer.pause([TopicPartition(*key)])
    finally:
        # librdkafka keeps a partition's pause across assignments: the next lookup must find it
        # fetching
        consumer.resume(assigned)
        consumer.unassign()
