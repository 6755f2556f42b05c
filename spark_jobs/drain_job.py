"""The drain job's entry: `run(...)` is one run of a drain on Spark (CLI, Dagster, tests)."""

from __future__ import annotations

import logging
import threading
import time

from pyspark.sql.types import DataType, StructType

from drainer import faults
from drainer.config import DrainConfig
from drainer.errors import ConfigError
from drainer.run import RunContext, RunResult, drain_once
from drainer.settings import Settings
from drainer.store import dead_letters, sinks
from drainer.store.leases import check_fence
from spark_jobs.kafka_source import counted, read_ranges
from spark_jobs.modes import run_dataframe_mode, run_record_mode
from spark_jobs.session import describe, get_spark

log = logging.getLogger(__name__)


def execute(ctx: RunContext) -> dict[tuple[str, int], int]:
    """Process one stored plan: read its ranges, run the processing mode, stage the results.

    Returns how many records were read per (topic, partition), for the commit's counts.
    """
    t0 = time.monotonic()
    spark = get_spark(ctx.settings)  # a cold session starts a JVM: timed as its own phase
    ctx.phases["spark_start"] = time.monotonic() - t0
    log.info("drain %s run %s on %s", ctx.drain.name, ctx.run.id, describe(spark))
    clear_run_outputs(ctx)
    if faults.armed("during_spark"):
        _crash_once_staging_starts(ctx)
    # the tag names this run's Spark jobs (in the UI, and for spark.interruptTag); a session
    # API, so it works on Connect as well as in-process
    tag = f"drainer-{ctx.drain.name}-run-{ctx.run.id}-attempt-{ctx.attempt}"
    spark.addTag(tag)
    try:
        df = read_ranges(
            spark, ctx.drain, ctx.settings.bootstrap_servers, ctx.run.ranges, ctx.read_from
        )
        if ctx.drain.mode == "dataframe":
            df, records_read = counted(df, ctx.run.ranges)
            run_dataframe_mode(ctx, df)
            return records_read()
        schema = DataType.fromDDL(ctx.drain.output_schema)
        if not isinstance(schema, StructType):
            raise ConfigError(f"output_schema {ctx.drain.output_schema!r} must list columns")
        read: dict[tuple[str, int], int] = {}
        for topic, partition, ok, failed, held_back, *_ in run_record_mode(ctx, df, schema):
            read[(topic, partition)] = read.get((topic, partition), 0) + ok + failed + held_back
        return read
    finally:
        spark.removeTag(tag)


def which_spark(settings: Settings | None = None) -> str:
    """The Spark that runs use in this process, in words (`Spark Connect sc://…`)."""
    return describe(get_spark(settings))


def clear_run_outputs(ctx: RunContext) -> None:
    """A resumed run starts afresh: drop what an earlier attempt staged (rows and failures).

    Fenced like the tasks' writes, so a zombie attempt cannot wipe the staging of the run that
    took its plan over (that run would then publish less than it processed).
    """
    with ctx.engine.begin() as conn:
        check_fence(conn, ctx.lease, shared=True)
        sinks.clear_staged(conn, ctx.drain.sink.table, ctx.run.id)
        dead_letters.clear_failures(conn, ctx.run.id)


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

    def watch() -> None:
        while True:
            with ctx.engine.connect() as conn:
                if sinks.staged_rows(conn, ctx.drain.sink.table, ctx.run.id):
                    faults.crash_point("during_spark")
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True, name="drainer-fault").start()
