"""The driver producer's input: the run's output rows streamed from Spark as column batches.

On Spark Connect the rows arrive as the Arrow tables the server streams (its own result
stream), converted column by column; on a classic session as Rows from `toLocalIterator`, in
chunks. `read_ahead` reads them on a thread of its own, a few tables ahead of the producer, so
computing, streaming and producing overlap and driver memory stays bounded by a few tables.
A staged run's rows go in parts (`in_parts`), each part one Spark job of a bounded size.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType

from drainer import faults
from drainer.sinks.kafka.out_batches import OutBatch
from spark_jobs.session import is_connect

READ_AHEAD = 4  # Arrow tables between the stream and the producer (Connect's are <= 4 MB)
JOIN_S = 2.0  # what leaving `read_ahead` waits for its reader thread
CHUNK_ROWS = 10_000  # rows per batch off a classic session's iterator
# On Connect a stream is one Spark job, and a job whose results pass the server's
# spark.driver.maxResultSize (1 GiB by default) fails: 10M 100-byte records made 1,088 MiB. A
# run planning more records than this is staged first and streamed in parts (`in_parts`).
STAGE_RECORDS = 2_000_000
# a part's rows, estimated: the server holds a part's results until the driver takes them
PART_BYTES = 128 * 2**20
ROW_BYTES = 32  # a row's fixed-width columns and Arrow offsets, beside its text and bytes
PART = "_drainer_part"  # a staged row's Spark partition, kept with it (`numbered_stage`)


@contextmanager
def read_ahead(
    batches: Iterator[OutBatch], depth: int = READ_AHEAD
) -> Iterator[Iterator[OutBatch]]:
    """`batches` read by a thread of their own, up to `depth` ahead of the consumer: the Spark
    stream and its conversion overlap the producer. An error of the stream reaches the consumer
    in order; a consumer that stops early stops the reader."""
    ahead: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for batch in batches:
                if not put(("batch", batch)):
                    return
        except BaseException as err:  # handed to the consumer, raised there
            put(("error", err))
            return
        put(("end", None))

    reader = threading.Thread(target=read, daemon=True, name="drainer-kafka-stream")
    reader.start()

    def consume() -> Iterator[OutBatch]:
        while True:
            kind, item = ahead.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item

    try:
        yield consume()
    finally:
        stop.set()
        # ended at once unless it waits on the stream for its next table: bounded, so an
        # error of the run is never held up by a server that no longer sends
        reader.join(timeout=JOIN_S)


def out_batches(rows: DataFrame) -> Iterator[OutBatch]:
    """The output rows as column batches, streamed one Arrow table (or chunk) at a time.

    On Spark Connect the rows arrive as the Arrow tables the server streams, converted column
    by column; elsewhere as Rows from `toLocalIterator`, in chunks.
    """
    tables = _arrow_stream(rows)
    if tables is None:
        chunk: list[Any] = []
        for row in rows.toLocalIterator():
            chunk.append(row)
            if len(chunk) >= CHUNK_ROWS:
                yield _rows_batch(chunk)
                chunk = []
        if chunk:
            yield _rows_batch(chunk)
        return
    for table in tables:
        if table.num_rows:
            yield _arrow_batch(table)


def numbered_stage(rows: DataFrame, on_disk: bool) -> DataFrame:
    """`rows` persisted with their Spark partition in a column (`PART`): a part's filter on it
    skips the other partitions' cached batches by their statistics, where a filter on
    `spark_partition_id()` decoded every row of the stage once per part. `on_disk`: a large
    run's stage, which held in the server's heap left no room there for the parts' results
    (at 10M, out of memory fetching a task's)."""
    level = StorageLevel.DISK_ONLY if on_disk else StorageLevel.MEMORY_AND_DISK
    return rows.withColumn(PART, F.spark_partition_id()).persist(level)


def partition_bytes(staged: DataFrame) -> dict[int, int]:
    """The staged rows' (`numbered_stage`) estimated Arrow bytes per Spark partition (those
    with rows): the first action on them, which fills the stage."""
    sized = [
        F.coalesce(F.length(f.name), F.lit(0))
        for f in staged.schema.fields
        if isinstance(f.dataType, (BinaryType, StringType))
    ]
    if "headers" in staged.columns:  # a header's key, value and offsets, roughly
        sized.append(F.greatest(F.size("headers"), F.lit(0)) * 64)
    row = F.lit(ROW_BYTES)
    for size in sized:
        row = row + size
    found = staged.groupBy(PART).agg(F.sum(row).alias("b")).collect()
    return {int(r[PART]): int(r["b"]) for r in found}


def parts(sizes: dict[int, int], most: int) -> list[tuple[int, int]]:
    """Consecutive partitions packed into parts of at most `most` bytes each (a partition
    larger than that is a part alone), as (first, last) partition ids, in order: streamed one
    after another, the parts keep the rows' order."""
    packed: list[tuple[int, int]] = []
    total = 0
    for partition in sorted(sizes):
        if packed and total + sizes[partition] <= most:
            packed[-1] = (packed[-1][0], partition)
            total += sizes[partition]
        else:
            packed.append((partition, partition))
            total = sizes[partition]
    return packed


def in_parts(staged: DataFrame, sizes: dict[int, int]) -> Iterator[OutBatch]:
    """The staged rows streamed one part after another (`parts`), each its own Spark job
    whose results stay below the server's limit; each part reads the stage, not Kafka."""
    packed = parts(sizes, PART_BYTES)
    if len(packed) <= 1:
        yield from out_batches(staged.drop(PART))
        return
    for first, last in packed:
        yield from out_batches(staged.where(F.col(PART).between(first, last)).drop(PART))


def _arrow_batch(table: pa.Table) -> OutBatch:
    names = set(table.column_names)

    def column(name: str) -> list[Any] | None:
        if name not in names:
            return None
        col = table.column(name)
        return None if col.null_count == len(col) else col.to_pylist()

    values = table.column("value")
    size = sum(
        pc.sum(pc.binary_length(table.column(name))).as_py() or 0
        for name in ("value", "key")
        if name in names
    )
    headers = None
    if "headers" in names:
        col = table.column("headers")
        if col.null_count < len(col) and pc.sum(pc.list_value_length(col)).as_py():
            headers = [_headers(h) for h in col.to_pylist()]
    return OutBatch(
        values=values.to_pylist(),
        keys=column("key"),
        headers=headers,
        partitions=column("partition"),
        topics=column("topic"),
        sources=column("source"),
        size=size,
    )


def _rows_batch(rows: list[Any]) -> OutBatch:
    """A chunk of a classic session's Rows (never empty) as columns."""
    names = rows[0].__fields__

    def own(name: str, convert: Any = None) -> list[Any] | None:
        if name not in names:
            return None
        col = [getattr(r, name) for r in rows]
        if all(v is None for v in col):
            return None
        return col if convert is None else [None if v is None else convert(v) for v in col]

    return OutBatch(
        values=[None if r.value is None else bytes(r.value) for r in rows],
        keys=own("key", bytes),
        headers=own("headers", _headers),
        partitions=own("partition"),
        topics=own("topic"),
        sources=own("source", bytes),
    )


def _headers(headers: Any) -> list[tuple[str, bytes | None]] | None:
    return [_header(h) for h in headers] if headers else None


def _arrow_stream(rows: DataFrame) -> Iterator[Any] | None:
    """The Connect client's own stream of Arrow tables (what its toLocalIterator reads), or None
    on a classic session."""
    if not is_connect(rows.sparkSession):
        return None
    connect: Any = rows  # a pyspark.sql.connect DataFrame: its client and plan
    client, plan = connect._session.client, connect._plan
    tags = client.get_tags()  # the run's attempt tag (spark.interruptTag finds the stream by it)

    def stream() -> Iterator[Any]:
        for tag in tags:  # a client's tags are per thread: this one may read the stream
            client.add_tag(tag)
        tables = client.to_table_as_iterator(plan.to_proto(client), plan.observations)
        yield from (t for t in tables if isinstance(t, pa.Table))

    return stream()


def _header(h: Any) -> tuple[str, bytes | None]:
    value = h["value"]
    if isinstance(value, str):
        value = value.encode()
    return str(h["key"]), None if value is None else bytes(value)


def crash_at_first(batches: Iterator[OutBatch]) -> Iterator[OutBatch]:
    """Fault injection: end the process once the Spark job has streamed its first rows, before
    any is produced (the rest of the job still runs on the server). Deterministic, where a
    timer could fire after a small run had committed."""
    for _ in batches:
        faults.crash_point("during_spark")
    yield from ()
