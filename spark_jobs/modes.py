"""Processing modes (docs/design.md): dataframe (whole-run transform) and record (per-record handler).

Both write their output through the staging sink inside the Spark tasks and send nothing but
per-task counts back to the driver, so driver memory is bounded by the plan, not the backlog.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from pyspark import TaskContext
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from drainer.callables import load_callable
from drainer.headers import encode_headers
from drainer.records import Record
from drainer.run import RunContext
from drainer.settings import psycopg_url
from drainer.store.dead_letters import stage_failures
from drainer.store.leases import check_fence
from drainer.store.sinks import ensure_sink_tables, write_staged
from spark_jobs.sinks import pg_columns


def _plain(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone()  # PySpark hands out local naive times; make them exact
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def run_dataframe_mode(ctx: RunContext, df: DataFrame) -> None:
    transform = load_callable(ctx.drain.processor, "processor")
    out = transform(df)
    columns = pg_columns(out.schema)
    ensure_sink_tables(ctx.engine, ctx.drain.sink.table, columns)
    names = [name for name, _ in columns]
    url, table, run_id = psycopg_url(ctx.settings.database_url), ctx.drain.sink.table, ctx.run.id
    lease = ctx.lease

    def write_partition(rows: Iterator[Row]) -> None:
        task = f"p{TaskContext.get().partitionId()}"
        with psycopg.connect(url) as conn:
            check_fence(conn, lease, shared=True)
            write_staged(
                conn, table, names, run_id, task, (tuple(_plain(v) for v in row) for row in rows)
            )

    out.foreachPartition(write_partition)


def run_record_mode(ctx: RunContext, df: DataFrame, output_schema: StructType) -> list[tuple]:
    """Per Kafka partition: (topic, partition, ok, failed, held_back, seconds).

    `seconds` is the task's wall time for that partition, from asking for its first record
    to its results staged: the processing itself, without the job's scheduling.
    """
    columns = pg_columns(output_schema)
    ensure_sink_tables(ctx.engine, ctx.drain.sink.table, columns)
    names = [name for name, _ in columns]
    url, table, run_id = psycopg_url(ctx.settings.database_url), ctx.drain.sink.table, ctx.run.id
    handler_path, ordering = ctx.drain.handler, ctx.drain.ordering
    concurrency = ctx.drain.max_concurrency
    lease = ctx.lease

    def process_partition(rows: Iterator[Row]) -> Iterator[tuple]:
        from drainer.record_processing import process_records

        handler = load_callable(handler_path, "handler")
        started = time.perf_counter()
        # a Spark partition of a Kafka read is one Kafka partition's range, in offset order;
        # its records stream into the handler while Spark is still reading them
        for (topic, partition), records in _by_kafka_partition(rows):
            outcomes = process_records(records, handler, ordering, concurrency)
            first, last = outcomes[0].record.offset, outcomes[-1].record.offset
            task = f"{topic}:{partition}:{first}"
            out_rows = (_as_tuple(row, names) for o in outcomes if o.ok for row in o.rows)
            not_done = [o for o in outcomes if not o.ok]
            with psycopg.connect(url) as conn:
                check_fence(conn, lease, shared=True)
                write_staged(conn, table, names, run_id, task, out_rows)
                _stage_failures(conn, run_id, topic, partition, first, last, not_done)
            failed = sum(1 for o in not_done if not o.held_back)
            seconds, started = time.perf_counter() - started, time.perf_counter()
            ok = len(outcomes) - len(not_done)
            yield (topic, partition, ok, failed, len(not_done) - failed, seconds)

    return _record_columns(df).rdd.mapPartitions(process_partition).collect()


def _record_columns(df: DataFrame) -> DataFrame:
    """The record's columns in a fixed order and in types PySpark hands over unconverted.

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


def _by_kafka_partition(rows: Iterator[Row]) -> Iterator[tuple[tuple[str, int], Iterator[Record]]]:
    """Split a stream of `_record_columns` rows into runs of one (topic, partition), each lazy.

    Each run must be consumed before the next is asked for. A Kafka partition that comes back
    after another one would break its offset order across two batches: a clear error.
    """
    rows = iter(rows)
    head = next(rows, None)
    seen: set[tuple[str, int]] = set()
    while head is not None:
        current = (head[0], head[1])
        if current in seen:
            raise ValueError(
                f"{current[0]}[{current[1]}]: rows of one Kafka partition are not contiguous"
            )
        seen.add(current)

        def run(first: Row = head, current: tuple[str, int] = current) -> Iterator[Record]:
            nonlocal head
            row = first
            while row is not None and (row[0], row[1]) == current:
                yield _record(row)
                row = next(rows, None)
            head = row

        yield current, run()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _record(row: Row) -> Record:
    """A `_record_columns` row as a Record, by position (Row attribute lookups are slow)."""
    topic, partition, offset, level, key, value, timestamp_us, headers = row
    return Record(
        topic=topic,
        partition=partition,
        offset=offset,
        level=level,
        key=None if key is None else bytes(key),
        value=None if value is None else bytes(value),
        timestamp=None if timestamp_us is None else _EPOCH + timedelta(microseconds=timestamp_us),
        headers=[(bytes(k).decode(), None if v is None else bytes(v)) for k, v in headers or ()],
    )


def _as_tuple(row: Any, names: list[str]) -> tuple:
    if isinstance(row, dict):
        missing = [n for n in names if n not in row]
        if missing:
            raise ValueError(f"handler row lacks output_schema columns {missing}: {row!r}")
        return tuple(_plain(row[n]) for n in names)
    values = tuple(row)
    if len(values) != len(names):
        raise ValueError(f"handler row has {len(values)} values, output_schema has {len(names)}")
    return tuple(_plain(v) for v in values)


def _stage_failures(conn, run_id, topic, partition, first, last, not_done) -> None:
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
    stage_failures(conn, run_id, topic, partition, first, last, rows)
