"""A run's output records as columns, and the loop that produces them into the open transaction.

The rows come from Spark as Arrow tables; one `OutBatch` holds one table's columns as plain
lists, so producing costs one `produce()` call per record and no Python object per row beyond
its bytes. Columns a batch does not use (no per-row topic, partition or headers) are None and
cost nothing. The loop checks what would make the whole transaction fail before a record of it
is sent: a topic that does not exist, a row without a value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from drainer.errors import ConfigError, DrainerError

SOURCE_HEADER = "drainer.source"

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
    known: set[str],
    run_headers: Sequence[tuple[str, bytes | None]],
    produced: Counter[str],
    failed: Callable[[KafkaError, str | None, str], DrainerError],
) -> int:
    """Produce `batch` (each record with its headers, the run's headers and its source's);
    count records per topic in `produced`; return the batch's key + value bytes. A record the
    producer refuses at once (too large, say) raises `failed(error, its source, its topic)`."""
    n = len(batch)
    topics: Iterable[str | None] = repeat(default_topic, n)
    if batch.topics is not None:
        topics = batch.topics
        for i, topic in enumerate(batch.topics):
            if (topic or default_topic) not in known:
                raise missing_topic(topic or default_topic, batch.source(i))
    elif default_topic not in known:
        raise missing_topic(default_topic, batch.source(0))
    columns: list[Iterable[Any]] = [
        batch.values,
        batch.keys if batch.keys is not None else repeat(None, n),
        batch.headers if batch.headers is not None else repeat(None, n),
        batch.partitions if batch.partitions is not None else repeat(None, n),
        topics,
        batch.sources if batch.sources is not None else repeat(None, n),
    ]
    for i, (value, key, own, partition, topic, src) in enumerate(zip(*columns, strict=False)):
        if value is None:
            raise ConfigError(
                f"an output row{_from(batch.source(i))} has no `value`: Kafka sink rows need a "
                "value (string or binary); set it in the processor or handler. Nothing was "
                "committed"
            )
        headers = [*own, *run_headers] if own else [*run_headers]
        if src is not None:
            headers.append((SOURCE_HEADER, src))
        kwargs = {} if partition is None else {"partition": partition}
        while True:
            try:
                produce(topic or default_topic, value, key, headers=headers, **kwargs)
                break
            except BufferError:  # the local queue is full: deliver, then retry
                poll(0.1)
            except KafkaException as err:
                raise failed(err.args[0], batch.source(i), topic or default_topic) from None
    if batch.topics is None:
        produced[default_topic] += n
    else:
        produced.update(t or default_topic for t in batch.topics)
    if batch.size is not None:
        return batch.size
    keys = batch.keys or ()
    return sum(len(v or b"") for v in batch.values) + sum(len(k or b"") for k in keys)


def missing_topic(topic: str, source: str | None = None) -> ConfigError:
    return ConfigError(
        f"the Kafka sink's output topic {topic} does not exist{_for(source)}: create it, e.g. "
        f"`kafka-topics.sh --bootstrap-server HOST:PORT --create --topic {topic} "
        "--partitions N`. Nothing was committed"
    )


def _from(source: str | None) -> str:
    return f" (from source record {source})" if source else ""


def _for(source: str | None) -> str:
    return f" (output of source record {source})" if source else ""
