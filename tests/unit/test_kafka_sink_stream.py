"""The Kafka sink's driver side without Spark: Arrow tables to column batches, and the bounded
read-ahead between the Spark stream and the producer (errors in order, no unbounded buffering)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql import Row

from drainer.sinks.kafka.out_batches import OutBatch
from spark_jobs.sinks.kafka.stream import _arrow_batch, _rows_batch, read_ahead

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _table(headers: list | None = None, topics: list | None = None) -> pa.Table:
    n = 2
    return pa.table(
        {
            "value": pa.array([b"v1", b"v22"], pa.binary()),
            "key": pa.array([b"k", None], pa.binary()),
            "headers": pa.array(headers or [None] * n, HEADERS),
            "partition": pa.array([None] * n, pa.int32()),
            "topic": pa.array(topics or [None] * n, pa.string()),
            "source": pa.array([b"t-0/0/1", b"t-0/0/2"], pa.binary()),
        }
    )


def test_an_arrow_table_becomes_columns_and_unused_ones_cost_nothing():
    batch = _arrow_batch(_table())
    assert list(batch.values) == [b"v1", b"v22"] and list(batch.keys or []) == [b"k", None]
    assert batch.headers is None and batch.partitions is None and batch.topics is None
    assert batch.source(1) == "t-0/0/2" and batch.size == 2 + 3 + 1


def test_a_table_of_values_alone_converts_the_columns_it_has():
    """`kafka_rows` leaves out columns the output does not have: no key, headers, routing or
    source crosses to the driver for them."""
    batch = _arrow_batch(pa.table({"value": pa.array([b"v1", None, b"v333"], pa.binary())}))
    assert list(batch.values) == [b"v1", None, b"v333"] and batch.size == 2 + 4
    assert (batch.keys, batch.headers, batch.partitions, batch.topics, batch.sources) == (
        (None,) * 5
    )
    assert batch.source(0) is None


def test_headers_keep_their_order_and_duplicates_and_a_row_may_name_its_topic():
    own = [[{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}], []]
    batch = _arrow_batch(_table(headers=own, topics=["elsewhere", None]))
    assert batch.headers == [[("h", b"1"), ("h", b"2")], None]
    assert batch.topics == ["elsewhere", None]


def test_rows_of_a_classic_session_become_the_same_columns():
    rows = [
        Row(value=bytearray(b"v"), key=None, headers=None, partition=None, topic=None, source=b"s"),
        Row(value=b"w", key=b"k", headers=[{"key": "h", "value": "x"}], partition=1, topic=None,
            source=None),
    ]  # fmt: skip
    batch = _rows_batch(rows)
    assert batch.values == [b"v", b"w"] and batch.keys == [None, b"k"]
    assert batch.headers == [None, [("h", b"x")]] and batch.partitions == [None, 1]
    assert batch.topics is None and batch.source(0) == "s" and batch.source(1) is None


def _batches(n: int, produced: list[int], fail_at: int | None = None) -> Iterator[OutBatch]:
    for i in range(n):
        if i == fail_at:
            raise RuntimeError("the stream broke")
        produced.append(i)
        yield OutBatch(values=[b"%d" % i])


def test_read_ahead_yields_every_batch_in_order_and_reads_at_most_depth_ahead():
    produced: list[int] = []
    with read_ahead(_batches(20, produced), depth=2) as batches:
        first = next(batches)
        time.sleep(0.2)  # the reader fills the queue, then waits
        assert len(produced) <= 1 + 2 + 1  # taken, queued, one held by the waiting reader
        rest = list(batches)
    assert [b.values[0] for b in [first, *rest]] == [b"%d" % i for i in range(20)]


def test_an_error_of_the_stream_reaches_the_consumer_after_the_batches_before_it():
    got = []
    with (
        pytest.raises(RuntimeError, match="the stream broke"),
        read_ahead(_batches(5, [], fail_at=3)) as batches,
    ):
        got.extend(b.values[0] for b in batches)
    assert got == [b"0", b"1", b"2"]


def test_a_consumer_that_stops_early_stops_and_joins_the_reader():
    with read_ahead(_batches(10_000, []), depth=1) as batches:
        next(batches)
    # joined on the way out: no reader thread is left by the time the block has ended
    assert not any(t.name == "drainer-kafka-stream" for t in threading.enumerate())
