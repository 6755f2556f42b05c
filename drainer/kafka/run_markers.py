"""What a run's Kafka transaction carries besides its output: the run header on every record,
the marker that proves the commit, and the dead letters that may join it (docs/kafka-sink.md).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drainer.kafka.producer import OutRecord

MARKER_TOPIC = "drainer-sink-markers"
MARKER_PARTITIONS = 8  # drains spread over them: one drain's open transaction delays few others
# `<run id>:<run nonce>:<attempt>`: the run (its id is unique in drainer's database, the marker
# names its drain) and the attempt that produced the record. One header, not three: each header
# costs the producer ~0.15 µs per record and the broker its bytes (issue 27's benchmark)
RUN_HEADER = "drainer.run"


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

    def value(self) -> bytes:
        data = {**self.fields(), "produced": dict(self.produced), "bytes": self.size}
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()

    def fields(self) -> dict[str, Any]:
        """What the marker says besides its counts (`produced`, `bytes`): the Spark server's
        producer adds those, which only it knows."""
        data: dict[str, Any] = {
            "drain": self.drain,
            "run": self.run_id,
            "nonce": self.nonce,
            "attempt": self.attempt,
        }
        if self.dlq_max_attempts is not None:
            data["dlq"] = {"max_attempts": self.dlq_max_attempts, "records": self.dead_letters}
        return data

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


@dataclass(frozen=True)
class DeadLetterJoin:
    """The drain's dead letters, to be produced in the run's transaction (exactly once)."""

    topic: str  # the drain's dlq_topic, on the sink's cluster
    max_attempts: int
    # asked once the output is produced: the Spark job's tasks have staged every failure then
    records: Callable[[], list[OutRecord]]


def marker_partition(drain: str) -> int:
    return zlib.crc32(drain.encode()) % MARKER_PARTITIONS
