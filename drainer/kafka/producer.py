"""Priority producer: send records to `{topic}-{level}`, level 0 by default.

A Python API for applications and the engine behind `drainer produce`. Delivery is checked:
`produce_records` returns only after every record is acknowledged, and raises if any failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, Producer

from drainer.config import DrainConfig
from drainer.config.kafka_clients import redact
from drainer.errors import ConfigError, KafkaUnavailable
from drainer.kafka.clients import client_config, make_client

PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
}


@dataclass(frozen=True)
class OutRecord:
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    timestamp_ms: int | None = None


def synthetic_records(
    count: int, keys: int = 100, value_size: int = 100, seed: int = 0
) -> Iterator[OutRecord]:
    """`count` JSON records over `keys` distinct keys, each value padded to `value_size` bytes."""
    if keys < 1:
        raise ConfigError("--keys must be at least 1")
    for seq in range(count):
        key = f"key-{(seq * 7919 + seed) % keys}"
        body = json.dumps({"seq": seq, "key": key}).encode()
        pad = max(0, value_size - len(body) - len(b',"pad":""'))
        value = body[:-1] + b',"pad":"' + b"x" * pad + b'"}' if pad else body
        yield OutRecord(value=value, key=key.encode())


def json_line_records(lines: Iterable[str]) -> Iterator[OutRecord]:
    """JSON lines from stdin: an object with `value` (any JSON) and optional `key`, `headers`.

    A line that is not such an object is an error naming the line, before anything is sent.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"stdin line {number} is not JSON: {err.msg}") from None
        if not isinstance(obj, dict) or "value" not in obj:
            obj = {"value": obj}
        value = obj["value"]
        raw = value.encode() if isinstance(value, str) else json.dumps(value).encode()
        key = obj.get("key")
        headers = [(str(k), str(v).encode()) for k, v in (obj.get("headers") or {}).items()]
        yield OutRecord(
            value=raw,
            key=None if key is None else str(key).encode(),
            headers=headers,
            timestamp_ms=obj.get("timestamp_ms"),
        )


def produce_records(
    drain: DrainConfig,
    records: Iterable[OutRecord],
    level: int = 0,
    on_progress: Callable[[int], None] | None = None,
    partition: int | None = None,
    topic: str | None = None,
) -> int:
    """Send records at a priority level (or to `topic`); returns how many were acknowledged."""
    if topic is None:
        topic = drain.level_topic(drain.check_level(level))
    producer = make_client(Producer, client_config(drain, **PRODUCER_DEFAULTS))
    errors: list[str] = []
    acked = 0

    def delivered(err, _msg) -> None:
        nonlocal acked
        if err is not None:
            errors.append(str(err))
        else:
            acked += 1

    sent = 0
    try:
        for record in records:
            kwargs = {"partition": partition} if partition is not None else {}
            if record.timestamp_ms is not None:
                kwargs["timestamp"] = record.timestamp_ms
            while True:
                try:
                    producer.produce(
                        topic,
                        record.value,
                        record.key,
                        headers=record.headers or None,
                        on_delivery=delivered,
                        **kwargs,
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain, then retry
                    producer.poll(0.1)
            sent += 1
            if sent % 10_000 == 0:
                producer.poll(0)
                if on_progress:
                    on_progress(sent)
        remaining = producer.flush(60)
    except KafkaException as err:
        raise KafkaUnavailable(redact(f"producing to {topic}: {err}")) from None
    if remaining or errors:
        detail = errors[0] if errors else f"{remaining} records still queued after 60 s"
        raise KafkaUnavailable(
            redact(
                f"{sent - acked} of {sent} records to {topic} were not acknowledged: {detail}. "
                "Check the broker (`drainer services status`) and send them again."
            )
        )
    if on_progress:
        on_progress(sent)
    return acked
