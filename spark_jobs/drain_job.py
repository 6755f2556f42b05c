"""The drain job's entry: `run(...)` is one run of a drain on Spark (CLI, Dagster, tests)."""

from __future__ import annotations

import logging
import re
import threading
import time
import traceback
from pathlib import Path

import pyspark
from pyspark.sql.types import DataType, StructType

from drainer import faults
from drainer.config import DrainConfig
from drainer.config.kafka_clients import redact
from drainer.errors import (
    ConfigError,
    DatabaseUnavailable,
    DrainerError,
    FencedOut,
    KafkaUnavailable,
    ProcessorFailed,
    ServiceUnavailable,
)
from drainer.lifecycle.run import RunContext, RunResult, drain_once
from drainer.settings import Settings
from drainer.store import sinks
from spark_jobs import modes
from spark_jobs.kafka_source import counted, read_ranges
from spark_jobs.modes import run_dataframe_mode, run_record_mode
from spark_jobs.session import describe, get_spark

log = logging.getLogger(__name__)


def execute(ctx: RunContext) -> dict[tuple[str, int], int]:
    """Process one stored plan: read its ranges, run the processing mode, stage the results.

    Returns how many records were read per (topic, partition), for the commit's counts.

    A service lost while the Spark job runs (Postgres gone under the tasks' writes, Kafka down
    past the client's timeout) comes back as a Py4J error hundreds of lines long; it leaves
    here as DatabaseUnavailable or KafkaUnavailable naming the root cause in one line, with the
    full trace in the log at DEBUG.
    """
    try:
        return _execute(ctx)
    except DrainerError:
        raise
    except Exception as err:
        known = known_failure(err)
        if known is None:
            raise
        log.debug("run %d: %s; the Spark error was:", ctx.run.id, known, exc_info=True)
        raise known from None


# root causes in a Spark/Py4J error's text: the first line that names one wins
_POSTGRES_CAUSE = re.compile(r"(psycopg\.(?:errors\.)?\w*OperationalError: [^\n]*)")
_KAFKA_CAUSE = re.compile(
    r"(org\.apache\.kafka\.common\.errors\.(?:TimeoutException|SaslAuthenticationException|"
    r"SslAuthenticationException|AuthenticationException)[^\n]*)"
)


_FENCED = re.compile(r"drainer\.errors\.FencedOut: ([^\n]*)")


def known_failure(err: BaseException) -> DrainerError | None:
    """A Spark job error that is one of drainer's own, as that error: a lost service, or a
    takeover the tasks' fence check refused (FencedOut raised in a task); else None."""
    fenced = _FENCED.search(str(err))
    if fenced:
        return FencedOut(fenced.group(1).strip())
    return service_lost(err)


def service_lost(err: BaseException) -> ServiceUnavailable | None:
    """The service a Spark job error says was lost, as a one-line drainer error; else None."""
    text = str(err)
    found = _POSTGRES_CAUSE.search(text)
    if found:
        return DatabaseUnavailable(
            redact(
                f"Postgres was lost while Spark tasks wrote the run's results "
                f"({found.group(1).strip()}). Nothing was committed: start Postgres again and "
                "rerun; the run resumes with the same ranges."
            )
        )
    found = _KAFKA_CAUSE.search(text)
    if found:
        return KafkaUnavailable(
            redact(
                f"Kafka stopped answering while Spark read the run's ranges "
                f"({found.group(1).strip()}). Nothing was committed: check the brokers "
                "(KAFKA_BOOTSTRAP_SERVERS) and rerun; the run resumes with the same ranges."
            )
        )
    return None


def _execute(ctx: RunContext) -> dict[tuple[str, int], int]:
    t0 = time.monotonic()
    spark = get_spark(ctx.settings)  # a cold session starts a JVM: timed as its own phase
    ctx.phases["spark_start"] = time.monotonic() - t0
    log.info("drain %s run %s on %s", ctx.drain.name, ctx.run.id, describe(spark))
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
            df, measure = counted(df, ctx.run.ranges)
            try:
                run_dataframe_mode(ctx, df)
            except Exception as err:
                if isinstance(err, DrainerError) or known_failure(err) is not None:
                    raise
                raise processor_failed(ctx, err) from err
            measured = measure()
            ctx.read_bytes.update({key: m.bytes for key, m in measured.items()})
            return {key: m.records for key, m in measured.items()}
        if ctx.drain.output_schema is None:  # the drains file's validation already refuses this
            raise ConfigError(f"drain {ctx.drain.name!r}: mode 'record' needs `output_schema`")
        schema = DataType.fromDDL(ctx.drain.output_schema)
        if not isinstance(schema, StructType):
            raise ConfigError(f"output_schema {ctx.drain.output_schema!r} must list columns")
        # bytes only from the observation: a record-mode job never prunes the read, so it is
        # there; were it missing, the bytes stay unmeasured rather than read twice
        df, measure = counted(df, ctx.run.ranges, recount=False)
        read: dict[tuple[str, int], int] = {}
        for topic, partition, ok, failed, held_back, *_ in run_record_mode(ctx, df, schema):
            read[(topic, partition)] = read.get((topic, partition), 0) + ok + failed + held_back
        ctx.read_bytes.update({key: m.bytes for key, m in measure().items()})
        return read
    finally:
        spark.removeTag(tag)


_WORKER_TRACEBACK = "Traceback (most recent call last):"
_PYSPARK = str(Path(pyspark.__file__).parent)


def processor_failed(ctx: RunContext, err: Exception) -> ProcessorFailed:
    """The processor's error as one line that says what happens next, then the user's frames.

    drainer's and pyspark's frames add nothing for the processor's author; `drainer -v` logs
    the full trace (the original error is chained).
    """
    summary, frames = user_error(err)
    name = ctx.drain.name
    return ProcessorFailed(
        redact(
            f"processor {ctx.drain.processor} failed: {summary}. Run {ctx.run.id} of drain "
            f"'{name}' stays open with its plan; the next `drainer run {name}` retries it with "
            "the same ranges (`drainer -v run` shows the full trace)."
            + "".join(f"\n{line}" for line in frames)
        )
    )


def user_error(err: BaseException) -> tuple[str, list[str]]:
    """`Type: message` of the processor's error, and the frames of its code (no library's).

    An error raised in a Spark task (a UDF) arrives as text carrying the Python worker's
    traceback; one raised while the processor built its DataFrame has a real traceback, whose
    frames after drainer's call of the processor are the user's.
    """
    text = str(err)
    if _WORKER_TRACEBACK in text:
        lines = [ln for ln in text[text.rindex(_WORKER_TRACEBACK) :].splitlines() if ln.strip()]
        return lines[-1].strip(), _user_frame_lines(lines[1:-1])
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    stack = traceback.extract_tb(err.__traceback__)
    calls = [i for i, frame in enumerate(stack) if frame.filename == modes.__file__]
    frames = [
        f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n    {frame.line}'
        for frame in stack[calls[-1] + 1 if calls else len(stack) :]
        if not frame.filename.startswith(_PYSPARK)
    ]
    return f"{type(err).__name__}: {first}", "\n".join(frames).splitlines()


def _user_frame_lines(lines: list[str]) -> list[str]:
    """A worker traceback's frame lines without pyspark's frames and the `^^^` markers."""
    kept: list[str] = []
    keep = True
    for line in lines:
        if line.lstrip().startswith("File "):
            keep = _PYSPARK not in line
        if keep and line.strip(" ^~"):
            kept.append(line)
    return kept


def which_spark(settings: Settings | None = None) -> str:
    """The Spark that runs use in this process, in words (`Spark Connect sc://…`)."""
    return describe(get_spark(settings))


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
