"""The drain job's entry: `run(...)` is one run of a drain on Spark (CLI, Dagster, tests)."""

from __future__ import annotations

import threading
import time

from pyspark.sql.types import DataType, StructType
from sqlalchemy import text

from drainer import faults
from drainer.config import DrainConfig
from drainer.run import RunContext, RunResult, drain_once
from drainer.sink_tables import RUN_COLUMN, staging_name, table_columns
from drainer.state import check_fence
from spark_jobs.kafka_source import read_ranges
from spark_jobs.modes import run_dataframe_mode, run_record_mode
from spark_jobs.session import get_spark


def execute(ctx: RunContext) -> None:
    """Process one stored plan: read its ranges, run the processing mode, stage the results."""
    t0 = time.monotonic()
    spark = get_spark(ctx.settings)  # a cold session starts a JVM: timed as its own phase
    ctx.phases["spark_start"] = time.monotonic() - t0
    spark.sparkContext.setJobGroup(
        f"drainer-{ctx.drain.name}-run-{ctx.run.id}",
        f"drain {ctx.drain.name}: run {ctx.run.id}, attempt {ctx.attempt}",
    )
    clear_run_outputs(ctx)
    if faults.armed("during_spark"):
        _crash_once_staging_starts(ctx)
    df = read_ranges(spark, ctx.drain, ctx.settings.bootstrap_servers, ctx.run.ranges)
    if ctx.drain.mode == "dataframe":
        run_dataframe_mode(ctx, df)
    else:
        schema = DataType.fromDDL(ctx.drain.output_schema)
        if not isinstance(schema, StructType):
            raise ValueError(f"output_schema {ctx.drain.output_schema!r} must list columns")
        run_record_mode(ctx, df, schema)


def clear_run_outputs(ctx: RunContext) -> None:
    """A resumed run starts afresh: drop what an earlier attempt staged (rows and failures).

    Fenced like the tasks' writes, so a zombie attempt cannot wipe the staging of the run that
    took its plan over (that run would then publish less than it processed).
    """
    staging = staging_name(ctx.drain.sink.table)
    with ctx.engine.begin() as conn:
        if ctx.lease is not None:
            check_fence(conn, ctx.lease, shared=True)
        if table_columns(conn, staging):
            conn.execute(
                text(f'DELETE FROM "{staging}" WHERE "{RUN_COLUMN}" = :r'), {"r": ctx.run.id}
            )
        conn.execute(text("DELETE FROM record_failures WHERE run_id = :r"), {"r": ctx.run.id})


def run(
    drain: DrainConfig | str,
    levels: list[int] | None = None,
    trigger: str = "cli",
    dagster_run_id: str | None = None,
    wait_s: float = 0.0,
    launch_key: str | None = None,
) -> RunResult:
    """One run of a drain: plan (or resume), execute on Spark, commit, mirror."""
    return drain_once(drain, execute, levels, trigger, dagster_run_id, wait_s, launch_key)


def _crash_once_staging_starts(ctx: RunContext) -> None:
    """Fault injection: end the process while the Spark job is writing its results."""
    staging = staging_name(ctx.drain.sink.table)

    def watch() -> None:
        while True:
            with ctx.engine.connect() as conn:
                exists = conn.scalar(text("SELECT to_regclass(:t)"), {"t": staging})
                if exists and conn.scalar(
                    text(f'SELECT count(*) FROM "{staging}" WHERE "{RUN_COLUMN}" = :r'),
                    {"r": ctx.run.id},
                ):
                    faults.crash_point("during_spark")
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True, name="drainer-fault").start()
