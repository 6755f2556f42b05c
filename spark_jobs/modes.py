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
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from drainer.errors import ConfigError
from drainer.lifecycle.run import RunContext
from drainer.processing.callables import load_callable
from drainer.processing.headers import encode_headers
from drainer.processing.record_processing import CHUNK_RECORDS, Outcome, process_in_chunks
from drainer.processing.records import Record
from drainer.settings import psycopg_url
from drainer.store.dead_letters import clear_partition_failures, stage_failures
from drainer.store.leases import check_fence
from drainer.store.sinks import clear_task_partition, ensure_sink_tables, write_staged
from spark_jobs.handler_rows import checked_rows
from spark_jobs.sinks import pg_columns

# what the tasks send back, as Spark DDL and as the Arrow schema of the batches they yield
DATAFRAME_COUNTS = "task string, rows long"
_DATAFRAME_ARROW = pa.schema([("task", pa.string()), ("rows", pa.int64())])
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


def run_dataframe_mode(ctx: RunContext, df: DataFrame) -> int:
    """Stage the processor's output from the tasks; returns the number of rows staged."""
    transform = load_callable(ctx.drain.processor, "processor")
    out = transform(df)
    columns = pg_columns(out.schema)
    _ensure_sink_tables(ctx, columns)
    names = [name for name, _ in columns]
    url, table, run_id = (
        psycopg_url(ctx.settings.database_url),
        ctx.drain.sink.postgres_table,
        ctx.run.id,
    )
    lease = ctx.lease

    def write_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task = f"p{_task_context().partitionId()}"
        with psycopg.connect(url) as conn:
            check_fence(conn, lease, shared=True)
            count = write_staged(conn, table, names, run_id, task, _arrow_rows(batches))
        yield pa.RecordBatch.from_pylist([{"task": task, "rows": count}], _DATAFRAME_ARROW)

    return sum(row[1] for row in out.mapInArrow(write_partition, DATAFRAME_COUNTS).collect())


def _ensure_sink_tables(ctx: RunContext, columns: list[tuple[str, str]]) -> None:
    """The target and this run's stage table, before any task writes (drainer.store.sinks)."""
    sink = ctx.drain.sink
    ensure_sink_tables(
        ctx.engine,
        sink.postgres_table,
        columns,
        ctx.run.id,
        partitioned=sink.publish_mode == "attach",
    )


def _arrow_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[Any, ...]]:
    """Rows of Arrow batches as tuples, one batch converted at a time (timestamps arrive in
    UTC, binary as bytes: nothing left to convert)."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


def run_record_mode(
    ctx: RunContext, df: DataFrame, output_schema: StructType
) -> list[tuple[Any, ...]]:
    """Per Kafka partition: (topic, partition, ok, failed, held_back, seconds, worker_peak_kb).

    `seconds` is the task's wall time for that partition, from asking for its first record
    to its last chunk staged: the processing itself, without the job's scheduling.
    `worker_peak_kb` is the peak resident memory of the Python worker that ran it.
    """
    columns = pg_columns(output_schema)
    _ensure_sink_tables(ctx, columns)
    names = [name for name, _ in columns]
    url, table, run_id = (
        psycopg_url(ctx.settings.database_url),
        ctx.drain.sink.postgres_table,
        ctx.run.id,
    )
    handler_path, ordering = ctx.drain.handler, ctx.drain.ordering
    if handler_path is None:  # the drains file's validation already refuses this
        raise ConfigError(f"drain {ctx.drain.name!r}: mode 'record' needs `handler`")
    concurrency = ctx.drain.max_concurrency
    lease = ctx.lease
    chunk_records = CHUNK_RECORDS

    def process_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # a row that cannot be written fails its record (attempts, dead letters), not the run
        handler = checked_rows(load_callable(handler_path, "handler"), columns)
        # a Spark partition of a Kafka read is one Kafka partition's range, in offset order;
        # its records stream into the handler while Spark is still reading them
        for (topic, partition), records in _by_kafka_partition(_arrow_records(batches)):
            started = time.perf_counter()
            ok = failed = held_back = 0
            with psycopg.connect(url) as conn:
                # a retried task starts its partition afresh: its chunks' keys may differ
                check_fence(conn, lease, shared=True)
                clear_task_partition(conn, table, run_id, topic, partition)
                conn.commit()
                for outcomes in process_in_chunks(
                    records, handler, ordering, concurrency, chunk_records
                ):
                    task = f"{topic}:{partition}:{outcomes[0].record.offset}"
                    out_rows = (_as_tuple(row, names) for o in outcomes if o.ok for row in o.rows)
                    not_done = [o for o in outcomes if not o.ok]
                    check_fence(conn, lease, shared=True)
                    write_staged(conn, table, names, run_id, task, out_rows)
                    _stage_failures(conn, run_id, topic, partition, not_done)
                    conn.commit()
                    chunk_failed = sum(1 for o in not_done if not o.held_back)
                    ok += len(outcomes) - len(not_done)
                    failed += chunk_failed
                    held_back += len(not_done) - chunk_failed
            row = {
                "topic": topic,
                "partition": partition,
                "ok": ok,
                "failed": failed,
                "held_back": held_back,
                "seconds": time.perf_counter() - started,
                "worker_peak_kb": _peak_rss_kb(),
            }
            yield pa.RecordBatch.from_pylist([row], _RECORD_ARROW)

    counts = _record_columns(df).mapInArrow(process_partition, RECORD_COUNTS).collect()
    return [tuple(row) for row in counts]


def _task_context() -> TaskContext:
    """The running Spark task's context; only the functions a task runs may ask."""
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("TaskContext.get() outside a Spark task: call this in mapInArrow only")
    return context


def record_mode_rows(ctx: RunContext, df: DataFrame, output_schema: StructType) -> DataFrame:
    """Record mode for a lakehouse sink: the handler's rows as a DataFrame for the table write.

    Failures are staged in Postgres a chunk at a time, as with the Postgres sink (fenced, and
    cleared per Kafka partition when a task is retried); output rows leave the task as Arrow
    batches of `output_schema`, so the table write consumes them without a Postgres stage.
    """
    names = output_schema.fieldNames()
    arrow_schema = to_arrow_schema(output_schema)
    url, run_id, lease = psycopg_url(ctx.settings.database_url), ctx.run.id, ctx.lease
    handler_path, ordering = ctx.drain.handler, ctx.drain.ordering
    concurrency = ctx.drain.max_concurrency
    chunk_records = CHUNK_RECORDS

    if handler_path is None:  # the drains file's validation already refuses this
        raise ConfigError(f"drain {ctx.drain.name!r}: mode 'record' needs `handler`")

    def process_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        handler = load_callable(handler_path, "handler")
        for (topic, partition), records in _by_kafka_partition(_arrow_records(batches)):
            with psycopg.connect(url) as conn:
                check_fence(conn, lease, shared=True)
                clear_partition_failures(conn, run_id, topic, partition)
                conn.commit()
                for outcomes in process_in_chunks(
                    records, handler, ordering, concurrency, chunk_records
                ):
                    rows = [_as_tuple(row, names) for o in outcomes if o.ok for row in o.rows]
                    check_fence(conn, lease, shared=True)
                    _stage_failures(
                        conn, run_id, topic, partition, [o for o in outcomes if not o.ok]
                    )
                    conn.commit()
                    if rows:
                        columns = [list(column) for column in zip(*rows, strict=True)]
                        yield pa.RecordBatch.from_arrays(
                            [
                                pa.array(c, type=f.type)
                                for c, f in zip(columns, arrow_schema, strict=True)
                            ],
                            schema=arrow_schema,
                        )

    return _record_columns(df).mapInArrow(process_partition, output_schema)


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
    for topic, partition, offset, level, key, value, timestamp_us, headers in _arrow_rows(batches):
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
    conn: psycopg.Connection[Any], run_id: int, topic: str, partition: int, not_done: list[Outcome]
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
    stage_failures(conn, run_id, topic, partition, rows)
