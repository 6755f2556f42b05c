"""The driver's read of small ranges (spark_jobs.driver_read), against a consumer stand-in:
which records it keeps, when a range ends, and that a read going nowhere fails."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from drainer.errors import KafkaUnavailable
from spark_jobs import driver_read
from spark_jobs.driver_read import _consume, _table, reads_in_driver


@dataclass
class _Message:
    topic_: str
    partition_: int
    offset_: int
    eof: bool = False
    headers_: Any = None

    def error(self) -> Any:
        return KafkaError(KafkaError._PARTITION_EOF) if self.eof else None

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes:
        return b"k%d" % self.offset_

    def value(self) -> bytes:
        return b"v"

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_700_000_000_000 + self.offset_

    def headers(self) -> Any:
        return self.headers_


@dataclass
class _Consumer:
    """Hands out `batches`, one per consume; positions past each batch's last message, or
    `positions` as given (a range ending on transaction markers no message shows)."""

    batches: list[list[_Message]]
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    paused: list[tuple[str, int]] = field(default_factory=list)

    def consume(self, count: int, timeout: float) -> list[_Message]:
        if not self.batches:
            return []
        batch = self.batches.pop(0)
        for m in batch:
            if not m.eof:
                key = (m.topic_, m.partition_)
                self.positions[key] = max(self.positions.get(key, 0), m.offset_ + 1)
        return batch

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(
                tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1001)
            )
            for tp in partitions
        ]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in partitions]


def _columns() -> dict[str, list[Any]]:
    return {name: [] for name in driver_read._NAMES}


def test_only_the_bounds_records_are_kept_and_a_range_ends_at_its_end():
    bounds = {("t-0", 0): (2, 5), ("t-1", 0): (0, 2)}
    consumer = _Consumer(
        [
            [_Message("t-0", 0, 2), _Message("t-1", 0, 0), _Message("t-0", 0, 3)],
            # past the end: fetched with the batch, not the range's
            [_Message("t-0", 0, 4), _Message("t-0", 0, 5), _Message("t-1", 0, 1)],
        ]
    )
    columns = _columns()
    _consume(consumer, bounds, columns)  # type: ignore[arg-type]
    assert sorted(zip(columns["topic"], columns["offset"], strict=True)) == [
        ("t-0", 2),
        ("t-0", 3),
        ("t-0", 4),
        ("t-1", 0),
        ("t-1", 1),
    ]
    assert set(consumer.paused) == {("t-0", 0), ("t-1", 0)}
    assert set(columns["timestampType"]) == {0}  # librdkafka's CREATE_TIME is Java's 0


def test_a_range_whose_last_offsets_are_markers_ends_at_the_position():
    """read_committed: offsets 3 and 4 (an aborted record, its marker) never show as messages."""
    consumer = _Consumer([[_Message("t-0", 0, 0), _Message("t-0", 0, 1), _Message("t-0", 0, 2)]])
    consumer.consume(0, 0)  # the batch, then the consumer's position moves past the markers
    consumer.positions[("t-0", 0)] = 5
    consumer.batches = [[_Message("t-0", 0, 5, eof=True)]]
    columns = _columns()
    _consume(consumer, {("t-0", 0): (0, 5)}, columns)  # type: ignore[arg-type]
    assert consumer.paused == [("t-0", 0)]


def test_a_read_that_makes_no_progress_fails_naming_its_ranges(monkeypatch):
    monkeypatch.setattr(driver_read, "IDLE_LIMIT_S", 0.0)
    with pytest.raises(KafkaUnavailable, match=r"t-0\[0\].*made no progress"):
        _consume(_Consumer([]), {("t-0", 0): (0, 3)}, _columns())  # type: ignore[arg-type]


def test_headers_become_the_kafka_sources_array_or_null():
    columns = _columns()
    consumer = _Consumer(
        [[_Message("t-0", 0, 0, headers_=[("a", b"1"), ("b", None)]), _Message("t-0", 0, 1)]]
    )
    _consume(consumer, {("t-0", 0): (0, 2)}, columns)  # type: ignore[arg-type]
    table = _table(columns).to_pylist()
    assert table[0]["headers"] == [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]
    assert table[1]["headers"] is None and table[1]["key"] == b"k1"


@pytest.mark.parametrize(
    ("ranges", "records", "cores", "driver"),
    [
        (36, 1_000, 2, True),
        (12, 1_000, 2, False),
        (192, 1_000_000, 2, False),
        (192, 1_000, None, False),
    ],
)
def test_the_driver_takes_many_small_ranges_in_dataframe_mode_only(ranges, records, cores, driver):
    assert reads_in_driver(ranges, records, cores) is driver


def test_a_killed_runs_staged_read_is_swept_a_day_later(tmp_path):
    old, new = tmp_path / "old-run", tmp_path / "new-run"
    for folder in (old, new):
        folder.mkdir()
        (folder / "part-0000.parquet").write_bytes(b"x")
    os.utime(old, (0, 0))
    driver_read.sweep(tmp_path)
    assert not old.exists() and new.exists()


def test_a_read_of_large_records_is_left_to_spark(monkeypatch):
    """The plan counts records, not bytes: past DRIVER_READ_MAX_BYTES the driver stops reading
    (`driver_read` then returns None and Spark's reader takes the ranges)."""
    monkeypatch.setattr(driver_read, "DRIVER_READ_MAX_BYTES", 5)  # each record is 3 bytes
    consumer = _Consumer([[_Message("t-0", 0, 0), _Message("t-0", 0, 1)]])
    with pytest.raises(driver_read._TooLarge):
        _consume(consumer, {("t-0", 0): (0, 2)}, _columns())  # type: ignore[arg-type]
