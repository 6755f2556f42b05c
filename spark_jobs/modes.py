"""Processing modes (docs/design.md): dataframe (whole-run transform) and record (per-record handler).

Both run on the DataFrame API only (no RDD, no SparkContext), so they work alike on an
in-process session and on a Spark Connect client. Rows reach Python as Arrow batches
(`mapInArrow`); the tasks write their output through the staging sink and send nothing but
per-task counts back to the driver, so driver memory is bounded by the plan, not the backlog.
Record mode stages its outcomes a chunk at a time, so a task's memory is bounded by a chunk,
not by its range.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import psycopg
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from drainer.errors import ConfigError
from drainer.lifecycle.results import RunContext
from drainer.processing.callables import load_callable
from drainer.processing.headers import encode_headers
from drainer.processing.record_processing import (
    CHUNK_RECORDS,
    Ordering,
    Outcome,
    process_in_chunks,
)
from drainer.processing.records import Record
from drainer.settings import psycopg_url
from drainer.store.dead_letters import clear_partition_failures, stage_failures
from drainer.store.leases import check_fence
from spark_jobs.handler_rows import checked_rows
from spark_jobs.row_types import row_columns

# what record mode's staging tasks send back, as Spark DDL and as their batches' Arrow schema
RECORD_COUNTS = (
    "topic string, partition int, ok long, failed long, held_back long, seconds double, "
    "worker_peak_kb long"
)
_RECORD_ARROW = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("ok", pa.int64()),
        ("failed", pa.int64()),
        ("held_back", pa.int64()),
        ("seconds", pa.float64()),
        ("worker_peak_kb", pa.int64()),
    ]
)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone()  # a naive time from a handler is local time; make it exact
    if isinstance(value, bytearray):
        return bytes(value)
    return value


class ChunkStage(Protocol):
    """Where a sink that stages from the tasks keeps each chunk's rows, with its failures, in
    one fenced transaction (the sink's own class, e.g. the Postgres sink's); picklable."""

    def clear(self, conn: Any, run_id: int, topic: str, partition: int, attempt: int) -> None:
        """A retried task's start: drop what earlier attempts staged for the partition (its
        rows and failures)."""

    def write(
        self, conn: Any, names: list[str], run_id: int, task: str, rows: list[tuple[Any, ...]]
    ) -> None:
        """Stage one chunk's rows under `task` (a retried chunk replaces its own)."""


@dataclass(frozen=True)
class RecordJob:
    """What record mode's tasks need, picklable: the handler, where to stage, the fence."""

    handler: str
    ordering: Ordering
    concurrency: int
    url: str
    run_id: int
    lease: Any
    names: list[str]
    # (name, SQL type) of the output's columns: a handler row that does not fit is that
    # record's failure (spark_jobs.handler_rows, spark_jobs.row_types)
    columns: list[tuple[str, str]]
    # a sink that stages from the tasks: each chunk's rows staged with the chunk's failures
    stage: ChunkStage | None = None
    attempt: int = 0  # the run's attempt: its staged failures are its own
    chunk_records: int = CHUNK_RECORDS

    @classmethod
    def of(
        cls, ctx: RunContext, columns: list[tuple[str, str]], stage: ChunkStage | None = None
    ) -> RecordJob:
        if ctx.drain.handler is None:  # the drains file's validation already refuses this
            raise ConfigError(f"drain {ctx.drain.name!r}: mode 'record' needs `handler`")
        return cls(
            ctx.drain.handler,
            ctx.drain.ordering,
            ctx.drain.max_concurrency,
            psycopg_url(ctx.settings.database_url),
            ctx.run.id,
            ctx.lease,
            [name for name, _ in columns],
            columns,
            stage,
            attempt=ctx.attempt,
        )


@dataclass
class PartitionDone:
    """Record mode's account of one Kafka partition in a task (run_record_mode's rows)."""

    topic: str
    partition: int
    ok: int = 0
    failed: int = 0
    held_back: int = 0
    started: float = field(default_factory=time.perf_counter)
    seconds: float = 0.0  # from asking for the first record to the last chunk staged


def handle_records(
    batches: Iterable[pa.RecordBatch], job: RecordJob
) -> Iterator[tuple[PartitionDone, list[tuple[Any, ...]], list[str]]]:
    """Record mode's one task loop: the handler over each Kafka partition's records in chunks.

    Each chunk's failures (and, with a `stage`, its rows) are staged in one fenced
    transaction before the chunk's rows are handed on; a retried task first drops what an
    earlier attempt of it staged for the partition. Yields each chunk's rows with its
    partition's running account and each row's source record (`topic/partition/offset`); a
    partition with no record yields nothing.
    """
    # a row that cannot be written fails its record (attempts, dead letters), not the run
    handler = checked_rows(load_callable(job.handler, "handler"), job.columns)
    # a Spark partition of a Kafka read is one Kafka partition's range, in offset order; its
    # records stream into the handler while Spark is still reading them
    for (topic, partition), records in _by_kafka_partition(_arrow_records(batches)):
        done = PartitionDone(topic, partition)
        with psycopg.connect(job.url) as conn:
            check_fence(conn, job.lease, shared=True)
            if job.stage is None:
                clear_partition_failures(conn, job.run_id, topic, partition, job.attempt)
            else:  # the rows' chunk keys may differ between attempts: the partition's, all
                job.stage.clear(conn, job.run_id, topic, partition, job.attempt)
            conn.commit()
            for outcomes in process_in_chunks(
                records, handler, job.ordering, job.concurrency, job.chunk_records
            ):
                rows = [_as_tuple(row, job.names) for o in outcomes if o.ok for row in o.rows]
                # where each row came from, parallel to `rows` (a sink may name it per row)
                sources = [
                    f"{topic}/{partition}/{o.record.offset}"
                    for o in outcomes
                    if o.ok
                    for _ in o.rows
                ]
                not_done = [o for o in outcomes if not o.ok]
                check_fence(conn, job.lease, shared=True)
                if job.stage is not None:
                    task = f"{topic}:{partition}:{outcomes[0].record.offset}"
                    job.stage.write(conn, job.names, job.run_id, task, rows)
                _stage_failures(conn, job.run_id, topic, partition, not_done, job.attempt)
                conn.commit()
                chunk_failed = sum(1 for o in not_done if not o.held_back)
                done.ok += len(outcomes) - len(not_done)
                done.failed += chunk_failed
                done.held_back += len(not_done) - chunk_failed
                done.seconds = time.perf_counter() - done.started
                yield done, rows, sources


def run_record_mode(
    ctx: RunContext, df: DataFrame, columns: list[tuple[str, str]], stage: ChunkStage
) -> list[tuple[Any, ...]]:
    """Record mode staging its rows through a sink's `stage`, chunk by chunk with the failures.

    Per Kafka partition: (topic, partition, ok, failed, held_back, seconds, worker_peak_kb).
    `seconds` is the task's wall time for that partition, from asking for its first record
    to its last chunk staged: the processing itself, without the job's scheduling.
    `worker_peak_kb` is the peak resident memory of the Python worker that ran it.
    """
    job = RecordJob.of(ctx, columns, stage)

    def process_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        last: PartitionDone | None = None
        for done, _, _ in handle_records(batches, job):
            if last is not None and last is not done:
                yield _counts_batch(last)
            last = done
        if last is not None:
            yield _counts_batch(last)

    counts = _record_columns(df).mapInArrow(process_partition, RECORD_COUNTS).collect()
    return [tuple(row) for row in counts]


def _counts_batch(done: PartitionDone) -> pa.RecordBatch:
    row = {
        "topic": done.topic,
        "partition": done.partition,
        "ok": done.ok,
        "failed": done.failed,
        "held_back": done.held_back,
        "seconds": done.seconds,
        "worker_peak_kb": _peak_rss_kb(),
    }
    return pa.RecordBatch.from_pylist([row], _RECORD_ARROW)


def record_mode_rows(
    ctx: RunContext, df: DataFrame, output_schema: StructType, source_column: str | None = None
) -> DataFrame:
    """Record mode for a sink that writes a frame: the handler's rows as a DataFrame.

    Failures are staged in Postgres a chunk at a time (fenced, and cleared per Kafka partition
    when a task is retried); output rows leave the task as Arrow batches of `output_schema`,
    so the sink's write consumes them without a Postgres stage. With `source_column`, each row
    also names its source record (`topic/partition/offset`) in that string column, last.
    """
    job = RecordJob.of(ctx, row_columns(output_schema))
    schema = output_schema
    if source_column is not None:
        schema = StructType([*output_schema.fields]).add(source_column, "string")
    arrow_schema = to_arrow_schema(schema)

    def process_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _, rows, sources in handle_records(batches, job):
            if rows:
                if source_column is not None:
                    rows = [(*row, src) for row, src in zip(rows, sources, strict=True)]
                columns = [list(column) for column in zip(*rows, strict=True)]
                yield pa.RecordBatch.from_arrays(
                    [pa.array(c, type=f.type) for c, f in zip(columns, arrow_schema, strict=True)],
                    schema=arrow_schema,
                )

    return _record_columns(df).mapInArrow(process_partition, schema)


def arrow_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[Any, ...]]:
    """Rows of Arrow batches as tuples, one batch converted at a time (timestamps arrive in
    UTC, binary as bytes: nothing left to convert)."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


def task_context() -> TaskContext:
    """The running Spark task's context; only the functions a task runs may ask."""
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("TaskContext.get() outside a Spark task: call this in mapInArrow only")
    return context


def _peak_rss_kb() -> int:
    """This process's peak resident set (VmHWM), in KiB; 0 where /proc is missing."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _record_columns(df: DataFrame) -> DataFrame:
    """The record's columns in a fixed order and in types that convert cheaply from Arrow.

    Per row, Python-side conversion is most of the cost of reading: timestamps go as epoch
    microseconds, headers as [key, value] byte pairs, and rows are read by position.
    """
    return df.select(
        "topic",
        "partition",
        "offset",
        "level",
        "key",
        "value",
        F.unix_micros("timestamp").alias("timestamp_us"),
        F.transform("headers", lambda h: F.array(F.encode(h["key"], "UTF-8"), h["value"])).alias(
            "headers"
        ),
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _arrow_records(batches: Iterable[pa.RecordBatch]) -> Iterator[Record]:
    """`_record_columns` batches as Records, one batch converted at a time."""
    for topic, partition, offset, level, key, value, timestamp_us, headers in arrow_rows(batches):
        yield Record(
            topic=topic,
            partition=partition,
            offset=offset,
            level=level,
            key=key,
            value=value,
            timestamp=None
            if timestamp_us is None
            else _EPOCH + timedelta(microseconds=timestamp_us),
            headers=[(k.decode(), v) for k, v in headers or ()],
        )


def _by_kafka_partition(
    records: Iterator[Record],
) -> Iterator[tuple[tuple[str, int], Iterator[Record]]]:
    """Split a stream of records into runs of one (topic, partition), each lazy.

    Each run must be consumed before the next is asked for. A Kafka partition that comes back
    after another one would break its offset order across two batches: a clear error.
    """
    records = iter(records)
    head = next(records, None)
    seen: set[tuple[str, int]] = set()
    while head is not None:
        current = (head.topic, head.partition)
        if current in seen:
            raise ValueError(
                f"{current[0]}[{current[1]}]: rows of one Kafka partition are not contiguous"
            )
        seen.add(current)

        def run(
            first: Record | None = head, current: tuple[str, int] = current
        ) -> Iterator[Record]:
            nonlocal head
            record: Record | None = first
            while record is not None and (record.topic, record.partition) == current:
                yield record
                record = next(records, None)
            head = record

        yield current, run()


def _as_tuple(row: Any, names: list[str]) -> tuple[Any, ...]:
    if isinstance(row, dict):
        missing = [n for n in names if n not in row]
        if missing:
            raise ValueError(f"handler row lacks output_schema columns {missing}: {row!r}")
        return tuple(_plain(row[n]) for n in names)
    values = tuple(row)
    if len(values) != len(names):
        raise ValueError(f"handler row has {len(values)} values, output_schema has {len(names)}")
    return tuple(_plain(v) for v in values)


def _stage_failures(
    conn: psycopg.Connection[Any],
    run_id: int,
    topic: str,
    partition: int,
    not_done: list[Outcome],
    attempt: int,
) -> None:
    rows = (
        (
            o.record.offset,
            o.held_back,
            o.record.key,
            o.record.value,
            encode_headers(o.record.headers),
            _plain(o.record.timestamp),
            o.error,
        )
        for o in not_done
    )
    stage_failures(conn, run_id, topic, partition, rows, attempt)
