"""Processing modes (DESIGN §7): dataframe (whole-run transform) and record (per-record handler).

Both write their output through the staging sink inside the Spark tasks and send nothing but
per-task counts back to the driver, so driver memory is bounded by the plan, not the backlog.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
from pyspark import TaskContext
from pyspark.sql import DataFrame, Row
from pyspark.sql.types import StructType

from drainer.records import Record, load_callable
from drainer.run import RunContext
from drainer.settings import psycopg_url
from drainer.sink_tables import ensure_sink_tables
from spark_jobs.sinks import pg_columns, write_staged


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

    def write_partition(rows: Iterator[Row]) -> None:
        task = f"p{TaskContext.get().partitionId()}"
        with psycopg.connect(url) as conn:
            write_staged(
                conn, table, names, run_id, task, (tuple(_plain(v) for v in row) for row in rows)
            )

    out.foreachPartition(write_partition)


def run_record_mode(ctx: RunContext, df: DataFrame, output_schema: StructType) -> list[tuple]:
    """Returns per-task counts: (topic, partition, ok, failed, held_back)."""
    columns = pg_columns(output_schema)
    ensure_sink_tables(ctx.engine, ctx.drain.sink.table, columns)
    names = [name for name, _ in columns]
    url, table, run_id = psycopg_url(ctx.settings.database_url), ctx.drain.sink.table, ctx.run.id
    handler_path, ordering = ctx.drain.handler, ctx.drain.ordering
    concurrency = ctx.drain.max_concurrency

    def process_partition(rows: Iterator[Row]) -> Iterator[tuple]:
        from drainer.record_processing import process_records

        handler = load_callable(handler_path, "handler")
        by_partition: dict[tuple[str, int], list[Record]] = {}
        for row in rows:
            by_partition.setdefault((row.topic, row.partition), []).append(_record(row))
        for (topic, partition), records in by_partition.items():
            records.sort(key=lambda r: r.offset)
            outcomes = process_records(records, handler, ordering, concurrency)
            task = f"{topic}:{partition}:{records[0].offset}"
            out_rows = (_as_tuple(row, names) for o in outcomes if o.ok for row in o.rows)
            not_done = [o for o in outcomes if not o.ok]
            with psycopg.connect(url) as conn:
                write_staged(conn, table, names, run_id, task, out_rows)
                _stage_failures(
                    conn, run_id, topic, partition, records[0].offset, records[-1].offset, not_done
                )
            failed = sum(1 for o in not_done if not o.held_back)
            yield (topic, partition, len(outcomes) - len(not_done), failed, len(not_done) - failed)

    return df.rdd.mapPartitions(process_partition).collect()


def _record(row: Row) -> Record:
    return Record(
        topic=row.topic,
        partition=row.partition,
        offset=row.offset,
        level=row.level,
        key=None if row.key is None else bytes(row.key),
        value=None if row.value is None else bytes(row.value),
        timestamp=row.timestamp,
        headers=[(h.key, None if h.value is None else bytes(h.value)) for h in row.headers or []],
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
    conn.execute(
        "DELETE FROM record_failures WHERE run_id = %s AND topic = %s AND partition = %s "
        'AND "offset" BETWEEN %s AND %s',
        (run_id, topic, partition, first, last),
    )
    with conn.cursor().copy(
        'COPY record_failures (run_id, topic, partition, "offset", held_back, key, value, headers, ts, error) '
        "FROM STDIN"
    ) as copy:
        for o in not_done:
            r = o.record
            headers = json.dumps(
                {k: None if v is None else v.decode("utf-8", "replace") for k, v in r.headers}
            )
            copy.write_row(
                (
                    run_id,
                    topic,
                    partition,
                    r.offset,
                    o.held_back,
                    r.key,
                    r.value,
                    headers,
                    _plain(r.timestamp),
                    o.error,
                )
            )
