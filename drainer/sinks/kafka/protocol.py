"""The Kafka sink's protocol, defined once for both producers (docs/kafka-sink.md).

What a run's transaction carries besides its output, and what a failure is called:

- the headers every output record carries (`drainer.run`, `drainer.source`) and their values;
- the marker that proves the commit: its topic, partition, key and JSON. The driver builds the
  whole marker (`RunMarker.template()`) but for two fields only the producer knows, the
  records per output topic and their bytes, which stand as placeholders; `fill()` replaces
  them. The Spark server's Java writer is handed the template and the placeholders as write
  options and applies the same rule (`KafkaTxnSink.fill`), so the JSON is made in one place;
- a row's null `value`: with `write: upsert` a tombstone (the record produced with its key and
  a null value), with `write: append` the `no_value` failure. The driver's producer asks
  `tombstones(write)`; the Java writer is handed the same answer as the option `TOMBSTONES`;
- the kinds of failure (`KINDS`): each kind's librdkafka codes for the driver's producer and
  Java exception classes for the server's, handed to the Java writer as an option (`java_kinds`)
  instead of a classification of its own.

tests/integration/test_kafka_sink_protocol.py runs both producers and compares the results
byte for byte.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError

MARKER_TOPIC = "drainer-sink-markers"
MARKER_PARTITIONS = 8  # drains spread over them: one drain's open transaction delays few others
# `<run id>:<run nonce>:<attempt>`: the run (its id is unique in drainer's database, the marker
# names its drain) and the attempt that produced the record. One header, not three: each header
# costs the producer ~0.15 µs per record and the broker its bytes (benchmarks/producer_floor.py)
RUN_HEADER = "drainer.run"
SOURCE_HEADER = "drainer.source"  # `<topic>/<partition>/<offset>` of the row's source record
# the marker's placeholders: a JSON string value, so `"<field>":"@"` can occur nowhere else in
# the template (a quote inside a JSON string is escaped)
PLACEHOLDER = "@"
PRODUCED_TOKEN = f'"produced":"{PLACEHOLDER}"'
BYTES_TOKEN = f'"bytes":"{PLACEHOLDER}"'

TOMBSTONES = "tombstones"  # the Java writer's option: "true" when a null value is a tombstone


def tombstones(write: str) -> bool:
    """Whether a row's null value is produced as a tombstone (else it fails the run)."""
    return write == "upsert"


_ERRORS = "org.apache.kafka.common.errors."
# the kinds of failure, in the order they are asked: the driver's librdkafka codes and the
# server's Java exception classes (an exception or any of its causes, by class or superclass)
KINDS: dict[str, tuple[frozenset[int], tuple[str, ...]]] = {
    # a newer producer of the drain took over
    "fenced": (
        frozenset(
            {
                KafkaError._FENCED,
                KafkaError.PRODUCER_FENCED,
                KafkaError.INVALID_PRODUCER_EPOCH,
                KafkaError.INVALID_PRODUCER_ID_MAPPING,
            }
        ),
        (f"{_ERRORS}ProducerFencedException", f"{_ERRORS}InvalidProducerEpochException"),
    ),
    "denied": (
        frozenset(
            {
                KafkaError.TOPIC_AUTHORIZATION_FAILED,
                KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                KafkaError.CLUSTER_AUTHORIZATION_FAILED,
            }
        ),
        (f"{_ERRORS}AuthorizationException",),
    ),
    "missing": (
        frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}),
        (f"{_ERRORS}UnknownTopicOrPartitionException",),
    ),
    "too_large": (
        frozenset({KafkaError.MSG_SIZE_TOO_LARGE}),
        (f"{_ERRORS}RecordTooLargeException", f"{_ERRORS}RecordBatchTooLargeException"),
    ),
    "timeout": (
        frozenset({KafkaError._TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE}),
        (f"{_ERRORS}TimeoutException",),
    ),
}
UNKNOWN_KIND = "unavailable"  # anything else


def kind_of(code: int) -> str:
    """A librdkafka error code's kind (`KINDS`), or `unavailable`."""
    return next((kind for kind, (codes, _) in KINDS.items() if code in codes), UNKNOWN_KIND)


def java_kinds() -> str:
    """`KINDS` for the Java writer: `kind=Class,Class;kind=Class`, in the order asked."""
    return ";".join(f"{kind}={','.join(classes)}" for kind, (_, classes) in KINDS.items())


def transactional_id(drain: str) -> str:
    """One per drain: a newer attempt of any run of the drain fences every older one."""
    return f"drainer-{drain}"


def run_header(run_id: int, nonce: str, attempt: int) -> bytes:
    return f"{run_id}:{nonce}:{attempt}".encode()


def parse_run_header(value: bytes) -> tuple[int, str, int]:
    """(run id, run nonce, attempt) of a `drainer.run` header."""
    run_id, nonce, attempt = value.decode().split(":")
    return int(run_id), nonce, int(attempt)


def source_of(topic: str, partition: int, offset: int) -> str:
    """The `drainer.source` header: where the output row came from (topic names hold no '/')."""
    return f"{topic}/{partition}/{offset}"


def marker_partition(drain: str) -> int:
    return zlib.crc32(drain.encode()) % MARKER_PARTITIONS


def _json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def fill(template: str, produced: Mapping[str, int], size: int) -> str:
    """The marker's JSON: `template` with the records per topic (topics with records only, in
    sorted order, compact) and their bytes in place of the placeholders, each replaced once.
    The Java writer applies the same rule (`KafkaTxnSink.fill`); topic names need no escaping
    (Kafka allows letters, digits, `.`, `_` and `-`)."""
    counts = {topic: n for topic, n in produced.items() if n}  # topics with records only
    return template.replace(PRODUCED_TOKEN, f'"produced":{_json(counts)}', 1).replace(
        BYTES_TOKEN, f'"bytes":{int(size)}', 1
    )


@dataclass(frozen=True)
class RunMarker:
    """What the run's transaction carries on the marker topic, and where it landed."""

    drain: str
    run_id: int
    nonce: str
    attempt: int
    produced: Mapping[str, int]  # records per output topic
    size: int  # key + value bytes produced
    offset: int = -1  # of the marker itself, once found or delivered
    # the attempt's dead letters went to the DLQ topic in this transaction, decided with this
    # max_attempts (None: they did not; the run publishes them after its commit)
    dlq_max_attempts: int | None = None
    dead_letters: int = 0  # of them

    def template(self) -> str:
        """The marker's JSON with placeholders for what only the producer knows."""
        data: dict[str, Any] = {
            "drain": self.drain,
            "run": self.run_id,
            "nonce": self.nonce,
            "attempt": self.attempt,
            "produced": PLACEHOLDER,
            "bytes": PLACEHOLDER,
        }
        if self.dlq_max_attempts is not None:
            data["dlq"] = {"max_attempts": self.dlq_max_attempts, "records": self.dead_letters}
        return _json(data)

    def value(self) -> bytes:
        return fill(self.template(), self.produced, self.size).encode()

    @classmethod
    def parse(cls, raw: bytes, offset: int) -> RunMarker | None:
        try:
            data = json.loads(raw)
            return cls(
                data["drain"],
                int(data["run"]),
                str(data["nonce"]),
                int(data["attempt"]),
                {str(k): int(v) for k, v in data["produced"].items()},
                int(data["bytes"]),
                offset,
                int(data["dlq"]["max_attempts"]) if "dlq" in data else None,
                int(data["dlq"]["records"]) if "dlq" in data else 0,
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # not ours: someone else wrote to the topic
