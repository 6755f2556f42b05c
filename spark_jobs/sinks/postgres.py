"""The Postgres sink, Spark side: the tasks stage the run's rows, the commit publishes them.

Each task writes its rows into the run's stage table (`drainer.store.sink_tables.write_staged`, fenced
by the drain's lease, keyed by task so a retried task replaces its rows) and sends back only a
count; the driver's commit transaction attaches the stage (drainer.sinks.postgres). Record mode
stages each chunk's rows together with its failures through this sink's `PostgresStage`
(spark_jobs.modes.handle_records).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pa_csv
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from drainer.errors import ConfigError
from drainer.lifecycle.results import RunContext
from drainer.settings import psycopg_url
from drainer.sinks import SinkCommit
from drainer.sinks.postgres import PostgresSink
from drainer.sinks.upsert import check_key_unchanged, upsert_spec
from drainer.store.leases import check_fence
from drainer.store.sink_tables import (
    clear_task_partition,
    ensure_sink_tables,
    relkind,
    write_staged,
    write_staged_csv,
)
from drainer.store.upserts import add_primary_key, primary_key
from spark_jobs import modes
from spark_jobs.row_types import SQL_TYPES
from spark_jobs.sinks.base import SparkSink
from spark_jobs.sinks.faults import crash_once
from spark_jobs.sinks.upsert import collapse

# what the staging tasks send back, as Spark DDL and as the Arrow schema of their batches
STAGED_COUNTS = "task string, rows long"
_STAGED_ARROW = pa.schema([("task", pa.string()), ("rows", pa.int64())])


def pg_columns(schema: StructType) -> list[tuple[str, str]]:
    columns = []
    for f in schema.fields:
        pg_type = SQL_TYPES.get(type(f.dataType))
        if pg_type is None:
            raise ConfigError(
                f"output column {f.name} has Spark type {f.dataType.simpleString()}, which the "
                "Postgres sink cannot store: cast it to a string, number, timestamp or binary"
            )
        columns.append((f.name, pg_type))
    return columns


@dataclass(frozen=True)
class PostgresStage:
    """Record mode's stage for the sink (modes.ChunkStage): each chunk's rows in the run's
    stage table, in the transaction that stages the chunk's failures."""

    table: str

    def clear(self, conn: Any, run_id: int, topic: str, partition: int, attempt: int) -> None:
        clear_task_partition(conn, self.table, run_id, topic, partition, attempt)

    def write(
        self, conn: Any, names: list[str], run_id: int, task: str, rows: list[tuple[Any, ...]]
    ) -> None:
        write_staged(conn, self.table, names, run_id, task, rows)


def csv_chunks(batches: Iterable[pa.RecordBatch], task: str) -> Iterator[tuple[memoryview, int]]:
    """Each Arrow batch as COPY's CSV, the task column added (the run column is the stage's
    default, one field less per row for Postgres to parse): Arrow's own CSV writer,
    no Python object per row (issue 30: one `write_row` per row made Postgres the slowest sink
    at 10M). Every type the sink stores but bytea encodes as Postgres reads it: strings always
    quoted (so an empty string is not a null, which is an empty field), timestamps ISO with
    `Z` for UTC, floats with nan/inf, booleans true/false."""
    options = pa_csv.WriteOptions(include_header=False)
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        columns = [*batch.columns, pa.repeat(pa.scalar(task, pa.string()), n)]
        out = pa.BufferOutputStream()
        pa_csv.write_csv(
            pa.RecordBatch.from_arrays(columns, [*batch.schema.names, "_task"]),
            out,
            write_options=options,
        )
        yield memoryview(out.getvalue()), n


class PostgresSparkSink(PostgresSink, SparkSink):
    """Stages from the tasks; nothing is visible before the commit transaction attaches it."""

    def committed(self, spark: SparkSession, ctx: RunContext) -> SinkCommit | None:
        """None: the run's rows are published by its Postgres commit, nothing before it."""
        return None

    def write(self, spark: SparkSession, ctx: RunContext, out: DataFrame) -> SinkCommit | None:
        spec = self.state_spec(ctx)
        if spec is not None:  # a state table: one row per key staged, merged by the commit
            out = collapse(out, spec, self.table)
        columns = pg_columns(out.schema)
        self._ensure_tables(ctx, columns)
        names = [name for name, _ in columns]
        url, table, run_id, lease = (
            psycopg_url(self.settings.database_url),
            self.table,
            ctx.run.id,
            ctx.lease,
        )

        as_csv = all(pg != "bytea" for _, pg in columns)

        def stage(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            task = f"p{modes.task_context().partitionId()}"
            with psycopg.connect(url) as conn:
                check_fence(conn, lease, shared=True)
                if as_csv:
                    chunks = csv_chunks(batches, task)
                    count = write_staged_csv(conn, table, names, run_id, task, chunks)
                else:
                    rows = modes.arrow_rows(batches)
                    count = write_staged(conn, table, names, run_id, task, rows)
            yield pa.RecordBatch.from_pylist([{"task": task, "rows": count}], _STAGED_ARROW)

        out.mapInArrow(stage, STAGED_COUNTS).collect()
        return None

    def write_records(
        self, spark: SparkSession, ctx: RunContext, df: DataFrame, output_schema: Any
    ) -> SinkCommit | None:
        """Record mode: each chunk's rows staged with its failures, in the handler's task."""
        columns = pg_columns(output_schema)
        self._ensure_tables(ctx, columns)
        modes.run_record_mode(ctx, df, columns, PostgresStage(self.table))
        return None

    def crash_while_writing(self, ctx: RunContext) -> None:
        def staging() -> bool:
            with ctx.engine.connect() as conn:
                return self.staged_rows(conn, ctx.run.id) > 0

        crash_once(staging)

    def _ensure_tables(self, ctx: RunContext, columns: list[tuple[str, str]]) -> None:
        """The target and this run's stage table, before any task writes."""
        spec = upsert_spec(self.config)
        if spec is not None:
            with ctx.engine.connect() as conn:
                if relkind(conn, self.table) is not None:
                    check_key_unchanged(self.table, primary_key(conn, self.table), spec)
        ensure_sink_tables(  # notes the columns it adds on the run, with the change
            ctx.engine,
            self.table,
            columns,
            ctx.run.id,
            partitioned=self.config.publish == "attach" and spec is None,
        )
        if spec is not None:  # a target just made gets its key
            with ctx.engine.begin() as conn:
                add_primary_key(conn, self.table, spec.keys)
