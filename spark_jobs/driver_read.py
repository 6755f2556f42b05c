"""A small read of many partitions, taken by the driver's own consumer (issue 51).

Spark's Kafka source reads each partition with a consumer of its own: assign, seek and fetch,
one partition after another inside a task, ~10 ms a partition on 2 cores whatever its records.
192,000 records on 3 x 64 partitions were a 3.4 s run against 1.6 s on 3 x 4. One librdkafka
consumer fetches all of a broker's partitions in one request: for such a run the driver reads
the records itself (0.5 s for those 192,000) and stages them as Parquet files of the Kafka
source's columns (`KAFKA_COLUMNS`), which Spark reads in one task per core; everything after
the read is the same job.

Only where Spark reads this machine's files: the local Connect server or an in-process session
on a `local` master (`spark_jobs.session.shares_files`). Handed to a Connect server as a local
relation instead, the same records took 1-2 s per plan analysis (the server converts the
relation again each time), more than Spark's own read.

The driver's consumer reads what Spark's would: [start, end) of each range, `read_committed`
unless the drain says otherwise (aborted records and transaction markers skipped), and a range
whose start retention deleted meanwhile fails the attempt (`auto.offset.reset: error`, as
Spark's `failOnDataLoss`) instead of skipping records. Each run's files sit in a folder of its
own, removed when its job ends (`drain_job`); one a killed run left is removed a day later.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.sql import DataFrame, SparkSession

from drainer.config import DrainConfig
from drainer.errors import KafkaUnavailable
from drainer.kafka.clients import consumer_config, kafka_error, make_client

# the Kafka source's columns with `includeHeaders` (a record without headers has null ones)
KAFKA_COLUMNS = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)
_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
# a read the driver takes: at least this many ranges (where Spark's per-partition cost shows;
# the suite's usual 3 x 4 stays with Spark's reader) and at most this many records (they pass
# through the driver's memory and this machine's disk)
DRIVER_READ_MIN_RANGES = 32
DRIVER_READ_MAX_RECORDS = 250_000
# and at most this many key and value bytes: the plan counts records, not their sizes, so a read
# of larger records stops here and is left to Spark (`driver_read` returns None)
DRIVER_READ_MAX_BYTES = 256 << 20
POLL_RECORDS = 10_000
# how long a consume waits for POLL_RECORDS: librdkafka returns early only when that many came,
# and a run's last records are fewer, so a long wait was the read's own cost (0.5 s of 0.51 s
# for 252 records); the loop looks at the ranges' positions between short waits instead
POLL_WAIT_S = 0.01
DRIVER_READS = "driver-reads"  # the folder of the home that holds the runs' staged reads
STALE_S = 24 * 3600.0  # a staged read this old is a killed run's
IDLE_LIMIT_S = 60.0  # no record and no progress for this long: the read fails, to be retried

Bounds = Mapping[tuple[str, int], tuple[int, int]]  # (topic, partition) -> [start, end)


def reads_in_driver(ranges: int, records: int, cores: int | None) -> bool:
    """Whether a dataframe-mode read (`cores` given; record mode keeps a task per partition)
    of `ranges` ranges holding `records` records is the driver's to take."""
    return (
        cores is not None
        and ranges >= DRIVER_READ_MIN_RANGES
        and records <= DRIVER_READ_MAX_RECORDS
    )


def driver_read(
    spark: SparkSession,
    drain: DrainConfig,
    bootstrap: str,
    bounds: Bounds,
    stage: Path,
    files: int,
) -> DataFrame | None:
    """The records of `bounds`, read by one consumer here and staged in `stage` as `files`
    Parquet files, as a DataFrame of `KAFKA_COLUMNS`; None when they hold more than
    `DRIVER_READ_MAX_BYTES` (Spark's reader is then the one to take them)."""
    sweep(stage.parent)
    try:
        table = read_records(drain, bootstrap, bounds)
    except _TooLarge:
        return None
    stage.mkdir(parents=True, exist_ok=True)
    step = max(1, -(-table.num_rows // max(1, files)))
    for i, start in enumerate(range(0, max(1, table.num_rows), step)):
        # uncompressed: the files live for one job, on this machine
        pq.write_table(
            table.slice(start, step), stage / f"part-{i:04d}.parquet", compression="none"
        )
    return spark.read.schema(KAFKA_COLUMNS).parquet(str(stage))


def sweep(folder: Path, older_than_s: float = STALE_S) -> None:
    """Remove the staged reads of runs killed before their job removed them."""
    if not folder.is_dir():
        return
    cutoff = time.time() - older_than_s
    for left in folder.iterdir():
        with contextlib.suppress(OSError):
            if left.stat().st_mtime < cutoff:
                shutil.rmtree(left, ignore_errors=True)


def read_records(drain: DrainConfig, bootstrap: str, bounds: Bounds) -> pa.Table:
    """Every record of `bounds` as an Arrow table of the Kafka source's columns."""
    config = consumer_config(
        drain,
        bootstrap,
        **{
            "group.id": "drainer-driver-read",  # assigned, never joined nor committed to
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": 10,
        },
    )
    consumer = make_client(Consumer, config)
    columns: dict[str, list[Any]] = {name: [] for name in _NAMES}
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in bounds.items()])
        _consume(consumer, bounds, columns)
    finally:
        consumer.close()
    return _table(columns)


_NAMES = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


class _TooLarge(Exception):
    """The read holds more bytes than the driver takes (`DRIVER_READ_MAX_BYTES`)."""


def _consume(consumer: Consumer, bounds: Bounds, columns: dict[str, list[Any]]) -> None:
    """Append each range's records to `columns` until every range reached its end."""
    left = {key for key, (start, end) in bounds.items() if start < end}
    add = {name: columns[name].append for name in _NAMES}
    idle_since = time.monotonic()
    size = 0
    while left:
        messages = consumer.consume(POLL_RECORDS, POLL_WAIT_S)
        for message in messages:
            error = message.error()
            key = (str(message.topic()), int(message.partition() or 0))
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise kafka_error(f"reading {key[0]}[{key[1]}]: {error.str()}", error)
                continue
            offset = message.offset() or 0
            if key not in left or offset >= bounds[key][1]:
                continue
            kind, stamp = message.timestamp()
            headers = message.headers()
            key_bytes, value_bytes = message.key(), message.value()
            size += len(key_bytes or b"") + len(value_bytes or b"")
            if size > DRIVER_READ_MAX_BYTES:
                raise _TooLarge
            add["key"](key_bytes)
            add["value"](value_bytes)
            add["topic"](key[0])
            add["partition"](key[1])
            add["offset"](offset)
            add["timestamp"](stamp)
            add["timestampType"](
                kind - 1
            )  # librdkafka's 1/2 are Java's CREATE_TIME 0 / LOG_APPEND_TIME 1
            add["headers"](
                [{"key": k, "value": v} for k, v in _pairs(headers)] if headers else None
            )
        # a range ends where the consumer's position passes its end: its last offsets may be
        # transaction markers or aborted records, which no message shows
        positions = consumer.position([TopicPartition(t, p) for t, p in left])
        done = {
            (tp.topic, tp.partition)
            for tp in positions
            if tp.offset >= bounds[(tp.topic, tp.partition)][1]
        }
        if done:
            consumer.pause([TopicPartition(t, p) for t, p in done])
            left -= done
        if messages or done:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_LIMIT_S:
            named = ", ".join(f"{t}[{p}]" for t, p in sorted(left)[:5])
            raise KafkaUnavailable(
                f"the driver's read of {len(left)} range(s) ({named}) made no progress for "
                f"{IDLE_LIMIT_S:.0f} s; the run fails and its next attempt reads them again"
            )


def _pairs(headers: Any) -> list[tuple[str, Any]]:
    """A message's headers as (key, value) pairs (confluent-kafka gives a list of them)."""
    return list(headers.items()) if isinstance(headers, dict) else list(headers)


def _table(columns: dict[str, list[Any]]) -> pa.Table:
    stamps = pa.array(columns["timestamp"], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    return pa.Table.from_arrays(
        [
            pa.array(columns["key"], pa.binary()),
            pa.array(columns["value"], pa.binary()),
            pa.array(columns["topic"], pa.string()),
            pa.array(columns["partition"], pa.int32()),
            pa.array(columns["offset"], pa.int64()),
            stamps.cast(pa.timestamp("us", tz="UTC")),
            pa.array(columns["timestampType"], pa.int32()),
            pa.array(columns["headers"], _HEADERS),
        ],
        names=list(_NAMES),
    )
