"""Reading a Kafka sink's output topic back, as a downstream consumer would (tests' helper)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from drainer.settings import load_settings
from drainer.sinks.kafka.protocol import RUN_HEADER, SOURCE_HEADER, parse_run_header


@dataclass(frozen=True)
class OutRecord:
    source: str | None
    run: str | None
    attempt: int | None
    value: bytes | None
    headers: dict[str, bytes]
    key: bytes | None = None
    header_list: tuple[tuple[str, bytes], ...] = ()  # in the order the producer wrote them


def admin() -> AdminClient:
    return AdminClient({"bootstrap.servers": load_settings().bootstrap_servers})


def auto_producer(spark) -> str:
    """The producer `producer: auto` must pick on this stack, from the stack, not from what the
    server happens to run: the server's wherever the local Connect server runs drainer's tasks
    and a JDK is on PATH (`expected_auto_producer`), else the driver's. A server that should
    have the writer and lacks it (its build failed, or it was started without it) fails here
    instead of the sink's silently producing from the driver."""
    from drainer.sinks.kafka.server_jar import SERVER_CONF

    expected = expected_auto_producer()
    if expected == "server":
        assert spark.conf.get(SERVER_CONF, ""), (
            "a JDK is on PATH but the Connect server runs without the Kafka sink's server jar: "
            "`producer: auto` would silently produce from the driver"
        )
    return expected


def expected_auto_producer() -> str:
    """ "server" on a stack whose local Connect server (local master) can load the writer: a
    JDK on PATH; "driver" on any other."""
    from drainer.settings import load_settings
    from drainer.spark.javac import has_jdk

    settings = load_settings()
    local = settings.local_spark_connect and settings.spark_master.startswith("local")
    return "server" if local and has_jdk() else "driver"


@contextmanager
def output_topic(partitions: int = 3, **config: str) -> Iterator[str]:
    """A fresh output topic, deleted afterwards."""
    name = f"out_{uuid.uuid4().hex[:8]}"
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)
    client = admin()  # kept: a collected client fails its futures
    client.create_topics([topic])[name].result(30)
    try:
        yield name
    finally:
        client.delete_topics([name], operation_timeout=10)[name].result(30)


def delete_topic(client: AdminClient, name: str) -> None:
    """Delete `name` and wait until the broker no longer lists it (deletion is asynchronous)."""
    client.delete_topics([name], operation_timeout=30)[name].result(30)
    deadline = time.monotonic() + 30
    while name in client.list_topics(timeout=30).topics:
        assert time.monotonic() < deadline, f"topic {name} was not deleted"
        time.sleep(0.2)


def read_output(topic: str, isolation: str = "read_committed") -> list[OutRecord]:
    """Every record of `topic` a consumer with `isolation` sees, up to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": load_settings().bootstrap_servers,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
        consumer.assign(parts)
        open_parts, out = {p.partition for p in parts}, []
        while open_parts:
            msg = consumer.poll(30)
            assert msg is not None, f"reading {topic} timed out"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                open_parts.discard(msg.partition())
                continue
            headers = {k: v for k, v in msg.headers() or []}
            run = headers.get(RUN_HEADER)
            run_id, nonce, attempt = parse_run_header(run) if run else (None, None, None)
            out.append(
                OutRecord(
                    (headers.get(SOURCE_HEADER) or b"").decode() or None,
                    None if run is None else f"{run_id}:{nonce}",
                    attempt,
                    msg.value(),
                    headers,
                    msg.key(),
                    tuple(msg.headers() or ()),
                )
            )
        return out
    finally:
        consumer.close()


def high_watermark(topic: str, partition: int) -> int:
    """The end offset of one partition of `topic` (its commit markers included)."""
    consumer = Consumer(
        {"bootstrap.servers": load_settings().bootstrap_servers, "group.id": "watermarks"}
    )
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
    finally:
        consumer.close()


def sources(topic: str, isolation: str = "read_committed") -> Counter:
    """How often each source record (`topic/partition/offset`) is in the output."""
    return Counter(r.source for r in read_output(topic, isolation))


def expected_sources(high: dict[tuple[str, int], int]) -> set[str]:
    return {f"{t}/{p}/{o}" for (t, p), end in high.items() for o in range(end)}


def assert_each_source_once(topic: str, high: dict[tuple[str, int], int]) -> None:
    """Distinct source coordinates from the headers, read_committed: each exactly once."""
    seen = sources(topic)
    twice = {k: n for k, n in seen.items() if n > 1}
    assert not twice, f"{len(twice)} source records produced twice, e.g. {list(twice)[:5]}"
    missing = expected_sources(high) - set(seen)
    assert not missing, f"{len(missing)} source records missing, e.g. {sorted(missing)[:5]}"
    assert set(seen) == expected_sources(high)
