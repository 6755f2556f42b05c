"""A run's output records as columns, and the loop that produces them into the open transaction.

The rows come from Spark as Arrow tables; one `OutBatch` holds one table's columns as plain
lists, so producing costs one `produce()` call per record and no Python object per row beyond
its bytes. Columns a batch does not use (no per-row topic, partition or headers) are None and
cost nothing. The loop checks what would make the whole transaction fail before a record of it
is sent: a topic that does not exist, a row without a value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from drainer.errors import DrainerError
from drainer.sinks.kafka.errors import missing_topic, no_value
from drainer.sinks.kafka.protocol import SOURCE_HEADER

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class OutBatch:
    """Output records, column by column, as Spark's Kafka sink schema describes them."""

    values: Sequence[bytes | None]
    keys: Sequence[bytes | None] | None = None
    headers: Sequence[Headers | None] | None = None  # each row's own headers, in order
    partitions: Sequence[int | None] | None = None
    topics: Sequence[str | None] | None = None  # None routes to the sink's topic
    sources: Sequence[bytes | None] | None = None  # `topic/partition/offset`, as bytes
    size: int | None = None  # key + value bytes (counted here when not given)

    def __len__(self) -> int:
        return len(self.values)

    def source(self, i: int) -> str | None:
        src = None if self.sources is None else self.sources[i]
        return None if src is None else src.decode()


def send_batch(
    produce: Callable[..., None],
    poll: Callable[[float], Any],
    batch: OutBatch,
    default_topic: str,
    known: Container[str],
    run_headers: Sequence[tuple[str, bytes | None]],
    produced: Counter[str],
    failed: Callable[[KafkaError, str | None, str], DrainerError],
    tombstones: bool = False,
) -> int:
    """Produce `batch` (each record with its headers, the run's headers and its source's);
    count records per topic in `produced`; return the batch's key + value bytes. A record the
    producer refuses at once (too large, say) raises `failed(error, its source, its topic)`.
    A null value is a tombstone when `tombstones` (protocol.tombstones), else a failure."""
    n = len(batch)
    topics: Iterable[str | None] = repeat(default_topic, n)
    if batch.topics is not None:
        topics = batch.topics
        for topic in set(batch.topics):  # each topic once per batch (and looked up once per run)
            if (topic or default_topic) not in known:
                first = batch.topics.index(topic)
                raise missing_topic(topic or default_topic, batch.source(first))
    elif default_topic not in known:  # the sink's own topic: no row to name (as on the server)
        raise missing_topic(default_topic)
    if batch.headers is None and batch.partitions is None and batch.topics is None:
        _send_plain(produce, poll, batch, default_topic, run_headers, failed, tombstones)
        produced[default_topic] += n
        return _size(batch)
    columns: list[Iterable[Any]] = [
        batch.values,
        batch.keys if batch.keys is not None else repeat(None, n),
        batch.headers if batch.headers is not None else repeat(None, n),
        batch.partitions if batch.partitions is not None else repeat(None, n),
        topics,
        batch.sources if batch.sources is not None else repeat(None, n),
    ]
    for i, (value, key, own, partition, topic, src) in enumerate(zip(*columns, strict=False)):
        if value is None and not tombstones:
            raise no_value(batch.source(i))
        headers = [*own, *run_headers] if own else [*run_headers]
        if src is not None:
            headers.append((SOURCE_HEADER, src))
        kwargs = {} if partition is None else {"partition": partition}
        to = topic or default_topic
        try:
            try:
                produce(to, value, key, headers=headers, **kwargs)
            except BufferError:  # the local queue is full (the cold path)
                produce_when_room(produce, poll, to, value, key, headers, kwargs)
        except KafkaException as err:
            raise failed(err.args[0], batch.source(i), to) from None
    if batch.topics is None:
        produced[default_topic] += n
    else:
        produced.update(t or default_topic for t in batch.topics)
    return _size(batch)


def _send_plain(
    produce: Callable[..., None],
    poll: Callable[[float], Any],
    batch: OutBatch,
    topic: str,
    run_headers: Sequence[tuple[str, bytes | None]],
    failed: Callable[[KafkaError, str | None, str], DrainerError],
    tombstones: bool = False,
) -> None:
    """`send_batch` for the common batch: every record to the sink's topic, no headers or
    partition of its own. Its loop does only what each record needs (~0.3 µs less per record)."""
    if not tombstones and None in batch.values:
        raise no_value(batch.source(batch.values.index(None)))
    keys = batch.keys if batch.keys is not None else repeat(None)
    sources = batch.sources if batch.sources is not None else repeat(None)
    ours = tuple(run_headers)
    for value, key, src in zip(batch.values, keys, sources, strict=False):
        headers = [*ours, (SOURCE_HEADER, src)] if src is not None else list(ours)
        try:
            try:
                produce(topic, value, key, headers=headers)
            except BufferError:  # the local queue is full (the cold path)
                produce_when_room(produce, poll, topic, value, key, headers, {})
        except KafkaException as err:
            raise failed(err.args[0], _text(src), topic) from None


def produce_when_room(
    produce: Callable[..., None],
    poll: Callable[[float], Any],
    topic: str,
    value: Any,
    key: Any,
    headers: Headers,
    kwargs: dict[str, Any],
) -> None:
    """Produce a record the full local queue refused: deliver queued ones, then again."""
    while True:
        poll(0.1)
        try:
            produce(topic, value, key, headers=headers, **kwargs)
            return
        except BufferError:
            continue


def _text(src: bytes | None) -> str | None:
    return None if src is None else src.decode()


def _size(batch: OutBatch) -> int:
    if batch.size is not None:
        return batch.size
    keys = batch.keys or ()
    return sum(len(v or b"") for v in batch.values) + sum(len(k or b"") for k in keys)
