"""Priority producer: send records to `{topic}-{level}`, level 0 by default.

A Python API for applications and the engine behind `drainer produce`. Delivery is checked:
`produce_records` returns only after every record is acknowledged, and raises if any failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from drainer.config import DrainConfig
from drainer.errors import ConfigError
from drainer.kafka.clients import kafka_error
from drainer.kafka.session import KafkaSession


@dataclass(frozen=True)
class OutRecord:
    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=list)
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


STDIN_KEYS = ("value", "key", "headers", "timestamp_ms")


ValueEncoder = Callable[[Any], bytes]
"""Encodes a value parsed from JSON in a drain's declared format (drainer.records.encode)."""


def json_line_records(
    lines: Iterable[str], encode: ValueEncoder | None = None, declared: str = ""
) -> Iterator[OutRecord]:
    """JSON lines from stdin: an object with `value` (any JSON) and optional `key`, `headers`
    (an object of header names and text) and `timestamp_ms` (epoch milliseconds).

    A line that is not such an object (no `value`, an unknown key such as a misspelt one, a
    wrong type) is an error naming the line; a line that is JSON but not an object is sent as
    the value. A `null` value is a Kafka null (a tombstone). Without `encode`, a string value is
    sent as its text and any other value as its JSON text; with it (a drain's `declared` json,
    avro or protobuf values), a string value is JSON text to parse first, and a value that is
    not JSON, or that `encode` refuses, is an error naming the line. The CLI reads every line
    before it sends one.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"stdin line {number} is not JSON: {err.msg}") from None
        if not isinstance(obj, dict):
            obj = {"value": obj}
        yield _stdin_record(number, obj, encode, declared)


def _stdin_record(
    number: int, obj: dict[str, Any], encode: ValueEncoder | None, declared: str
) -> OutRecord:
    where = f"stdin line {number}"
    unknown = sorted(set(obj) - set(STDIN_KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {', '.join(map(repr, unknown))}: a record is an object of "
            f"{', '.join(STDIN_KEYS)}"
            + (" (`timestamp_ms`: epoch milliseconds)" if "timestamp" in unknown else "")
        )
    if "value" not in obj:
        raise ConfigError(f'{where} has no "value": write {{"key": ..., "value": ...}}')
    key = obj.get("key")
    headers = obj.get("headers") or {}
    if not isinstance(headers, dict):
        raise ConfigError(f'{where}: "headers" must be an object of header names and text')
    timestamp = obj.get("timestamp_ms")
    if timestamp is not None and (isinstance(timestamp, bool) or not isinstance(timestamp, int)):
        raise ConfigError(f'{where}: "timestamp_ms" must be whole epoch milliseconds')
    return OutRecord(
        value=_value_bytes(where, obj["value"], encode, declared),
        key=None if key is None else str(key).encode(),
        headers=[(str(k), None if v is None else str(v).encode()) for k, v in headers.items()],
        timestamp_ms=timestamp,
    )


def _value_bytes(
    where: str, value: Any, encode: ValueEncoder | None, declared: str
) -> bytes | None:
    if value is None:
        return None  # a tombstone: Kafka's null value, not the four bytes `null`
    if encode is None:
        return value.encode() if isinstance(value, str) else json.dumps(value).encode()
    as_text = "send the text as it is with `--format string`"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ConfigError(
                f"{where}: the value is not JSON ({err.msg}), and values are produced as "
                f"{declared} here: write the value as JSON, or {as_text}"
            ) from None
    try:
        return encode(value)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    except (ValueError, TypeError, KeyError) as err:  # a value the declared schema refuses
        raise ConfigError(
            f"{where}: the value does not encode as {declared} ({type(err).__name__}: "
            f"{err}): fix the value, or {as_text}"
        ) from None


def produce_records(
    drain: DrainConfig,
    records: Iterable[OutRecord],
    level: int = 0,
    on_progress: Callable[[int], None] | None = None,
    partition: int | None = None,
    topic: str | None = None,
    *,
    kafka: KafkaSession,
) -> int:
    """Send records at a priority level (or to `topic`); returns how many were acknowledged.

    Uses the producer of `kafka`, the run's or the command's session.
    """
    if topic is None:
        topic = drain.level_topic(drain.check_level(level))
    producer = kafka.producer
    errors: list[Any] = []
    acked = 0

    def delivered(err: Any, _msg: Any) -> None:
        nonlocal acked
        if err is not None:
            errors.append(err)
        else:
            acked += 1

    sent = 0
    try:
        for record in records:
            kwargs: dict[str, Any] = {"partition": partition} if partition is not None else {}
            if record.timestamp_ms is not None:
                kwargs["timestamp"] = record.timestamp_ms
            while True:
                try:
                    producer.produce(
                        topic,
                        record.value,
                        record.key,
                        headers=_headers(record),
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
        _discard(producer)
        raise kafka_error(f"producing to {topic}: {err}", err) from None
    except BaseException:
        _discard(producer)  # a bad input line: what was queued of this call is not sent
        raise
    if remaining or errors:
        _discard(producer)  # the caller sends them again; the session's close must not wait
        detail = errors[0].str() if errors else f"{remaining} records still queued after 60 s"
        raise kafka_error(
            f"{sent - acked} of {sent} records to {topic} were not acknowledged: {detail}. "
            "Check the broker (`drainer services status`) and send them again.",
            errors[0] if errors else TimeoutError(),
        )
    if on_progress:
        on_progress(sent)
    return acked


def _discard(producer: Any) -> None:
    """Drop what this call left queued, so that closing the session neither sends nor waits."""
    producer.purge()
    producer.poll(0)


def _headers(record: OutRecord) -> list[tuple[str, str | bytes | None]] | None:
    """The record's headers as the producer takes them (None: no headers at all)."""
    headers: list[tuple[str, str | bytes | None]] = list(record.headers)
    return headers or None
