"""The drain job's entry: `run(...)` is one run of a drain on Spark (CLI, Dagster, tests)."""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType
from sqlalchemy import Engine

from drainer import faults
from drainer.config import DrainConfig
from drainer.config.kafka_clients import redact
from drainer.errors import (
    ConfigError,
    DatabaseUnavailable,
    DrainerError,
    FencedOut,
    KafkaUnavailable,
    ServiceUnavailable,
    SparkUnavailable,
)
from drainer.level_topics import topic_level
from drainer.lifecycle.results import ExecutionResult, RunContext, RunResult
from drainer.lifecycle.run import drain_once
from drainer.processing.callables import load_callable
from drainer.settings import Settings
from drainer.sinks import SinkCommit
from drainer.store import runs
from drainer.store.leases import check_fence
from drainer.store.runs import StoredRange, StoredRun
from spark_jobs.attempts import attempt_tag, holding_server, stop_earlier_attempts, stop_interrupted
from spark_jobs.bad_records import ReasonOf, guarded, known_bad_record, stage_bad_records
from spark_jobs.decode import ERROR, STRUCTURED, decode
from spark_jobs.driver_read import DRIVER_READS
from spark_jobs.imports import import_failed_in_tasks
from spark_jobs.kafka_source import Measure, Read, count_read, read_ranges
from spark_jobs.processor_errors import processor_failed
from spark_jobs.retried import retried_records
from spark_jobs.run_counts import RunCounts, run_counts
from spark_jobs.session import cores, describe, get_spark, shares_files
from spark_jobs.sinks import SparkSink, spark_sink_for
from spark_jobs.sinks.upsert import flag_records

log = logging.getLogger(__name__)


def execute(ctx: RunContext) -> ExecutionResult:
    """Process one stored plan: read its ranges, run the processing mode, write the sink.

    Returns what was read per (topic, partition) and the sink's table commit, for the commit.

    A service lost while the Spark job runs (Postgres gone under the tasks' writes, Kafka down
    past the client's timeout) comes back as a Py4J error hundreds of lines long; it leaves
    here as DatabaseUnavailable or KafkaUnavailable naming the root cause in one line, with the
    full trace in the log at DEBUG.
    """
    try:
        with holding_server(ctx):
            return _execute(ctx)
    except DrainerError:
        raise
    except Exception as err:
        known = known_failure(err, ctx.drain, ctx.settings, _spark_sink(ctx))
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


def known_failure(
    err: BaseException,
    drain: DrainConfig | None,
    settings: Settings,
    sink: SparkSink | None = None,
) -> DrainerError | None:
    """A Spark job error that is one of drainer's own, as that error: a lost service, the
    drain's sink's service (an Iceberg catalog) not answering, its code not importing in the
    tasks, or a takeover the tasks' fence check refused (FencedOut raised in a task); else None.
    `settings`: the run's, which say where its sink and its Connect server are."""
    fenced = _FENCED.search(str(err))
    if fenced:
        return FencedOut(fenced.group(1).strip())
    if drain is not None:
        sink = sink or spark_sink_for(drain.sink, settings, drain.name)
        unreachable = sink.known_failure(err, drain.name)
        if unreachable is not None:
            return unreachable
        not_imported = import_failed_in_tasks(str(err), drain, settings)
        if not_imported is not None:
            return not_imported
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
    if _connect_lost(err):
        first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
        return SparkUnavailable(
            redact(
                f"the Spark Connect server stopped answering during the run ({first[:200]}). "
                "Nothing was committed: start the server again (`drainer services up` for the "
                "local one) and rerun; the run resumes with the same ranges."
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


# the server went away (UNAVAILABLE), or came back as a new process that no longer knows the
# session or the operation the client reattaches to
_CONNECT_GONE = (
    "INVALID_HANDLE.SESSION_CHANGED",
    "INVALID_HANDLE.OPERATION_NOT_FOUND",
    "Cannot call methods on a stopped SparkContext",  # the server is shutting down under a job
)


def _connect_lost(err: BaseException) -> bool:
    """True for a Spark Connect client error that says the server is gone, not the job."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    if not isinstance(err, SparkConnectGrpcException):
        return False
    if getattr(err.getGrpcStatusCode(), "name", None) == "UNAVAILABLE":  # a grpc.StatusCode
        return True
    return (err.getCondition() or "") in _CONNECT_GONE or any(c in str(err) for c in _CONNECT_GONE)


def _spark_sink(ctx: RunContext) -> SparkSink:
    return spark_sink_for(ctx.drain.sink, ctx.settings, ctx.drain.name)


def _execute(ctx: RunContext) -> ExecutionResult:
    """Read, process, write; a sink that commits before Postgres is asked first whether an
    earlier attempt's commit already landed (then nothing is written again)."""
    drain, settings = ctx.drain, ctx.settings
    t0 = time.monotonic()
    sink = _spark_sink(ctx)
    # a cold session starts a JVM: its own phase
    spark = get_spark(
        settings,
        check=True,
        sink_conf=sink.session_conf(),
        callables=(drain.processor, drain.handler),
    )
    spark_start = time.monotonic() - t0
    log.info("drain %s run %s on %s", drain.name, ctx.run.id, describe(spark))
    sink.prepare(spark, drain.name)
    landed = None
    if sink.capabilities.commit == "before_postgres":
        _check_lease(ctx)  # the sink is searched for the run, and written, under the lease
        stop_earlier_attempts(ctx, spark)
        # the proof on record in Postgres first: it outlives the table's own history. A first
        # attempt has none to find: no attempt of the plan started before it (attempts count
        # up before any write) and its nonce is new, so no table holds a commit of it; the
        # searches (the table's history, ~0.3 s a run) are for resumed runs
        if ctx.attempt > 1:
            landed = proof_on_record(ctx, sink) or sink.committed(spark, ctx)
        if landed is not None:
            record_proof(ctx, landed)
    failures_of = ctx.attempt if landed is None else landed.attempt
    if not (ctx.readable_ranges() or ctx.run.retries):
        # retention deleted every planned record since the plan: nothing to read or write; a
        # commit an earlier attempt made is still the run's, and goes on record with it
        return ExecutionResult(
            read={}, spark_start_s=spark_start, table_commit=landed, failures_attempt=failures_of
        )
    # the tag names this run's Spark jobs (in the UI, and for spark.interruptTag); a session
    # API, so it works on Connect as well as in-process
    tag = attempt_tag(ctx, ctx.attempt)
    spark.addTag(tag)
    # where the driver stages a small read of many partitions (spark_jobs.driver_read), if Spark
    # reads this machine's files; removed with the attempt's job
    stage = None
    if drain.mode == "dataframe" and shares_files(spark, settings):
        stage = settings.home / DRIVER_READS / tag
    try:
        # a run of retried dead letters has no ranges: its records come from Postgres
        df = (
            retried_records(spark, ctx)
            if ctx.run.retries
            else read_ranges(
                spark,
                drain,
                settings.bootstrap_servers,
                ctx.run.ranges,
                ctx.read_from,
                cores=cores(spark) if drain.mode == "dataframe" else None,
                home=settings.home,
                stage=stage,
            )
        )
        if landed is not None:
            log.warning(
                "run %d of drain %s: %s already holds its commit (%s %d); committing Postgres only",
                ctx.run.id,
                drain.name,
                landed.location,
                sink.capabilities.commit_id,
                landed.id,
            )
            counts = count_read(df, ctx.run.ranges)
            # the commit that landed left them out: stage again, as the landed attempt's
            _stage_bad_records(ctx, spark, sink, df, failures_of)
            return ExecutionResult(
                read={key: m.records for key, m in counts.items()},
                read_bytes=_bytes_of(counts),
                spark_start_s=spark_start,
                table_commit=landed,
                failures_attempt=failures_of,
            )
        if faults.armed("during_spark"):
            sink.crash_while_writing(ctx)
        counting = run_counts(ctx, _decodes(drain))
        decoded, measure = None, None
        if sink.keeps_decoded and _decodes(drain):
            # decoded once, from the counted read: the sink keeps the records, so its staging
            # and its write read (and count) Kafka once
            df, measure = counting.beneath(df)
            with _failures_named(ctx, spark, sink, processed=False):  # a sink may fail one here
                decoded = _flagged(ctx, spark, sink, df)
            _stage_bad_records(ctx, spark, sink, df, ctx.attempt, decoded)
        else:
            # staged from the read before it is counted: the count rides on the write's job
            _stage_bad_records(ctx, spark, sink, df, ctx.attempt)
        commit, measure = _write(ctx, spark, sink, df, counting, decoded, measure)
        if commit is not None:
            record_proof(ctx, commit)  # on record before anything else can fail
            log.info("run %d of drain %s: %s", ctx.run.id, drain.name, sink.commit_line(commit))
            faults.crash_point("after_table_commit")
        measured = measure()
        return ExecutionResult(
            read={key: m.records for key, m in measured.items()},
            read_bytes=_bytes_of(measured),
            spark_start_s=spark_start,
            table_commit=commit,
            sink_steps=sink.steps(),
            # the attempt whose write landed (an earlier one's, when it won a race)
            failures_attempt=ctx.attempt if commit is None else commit.attempt,
        )
    except KeyboardInterrupt:
        stop_interrupted(spark, tag)
        raise
    finally:
        sink.release(ctx)
        spark.removeTag(tag)
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


def _bytes_of(measured: Mapping[tuple[str, int], Read]) -> dict[tuple[str, int], int] | None:
    """The bytes read per (topic, partition); None when the run did not count them."""
    if any(m.bytes is None for m in measured.values()):
        return None
    return {key: m.bytes or 0 for key, m in measured.items()}


def _write(
    ctx: RunContext,
    spark: SparkSession,
    sink: SparkSink,
    read: DataFrame,
    counts: RunCounts,
    decoded: DataFrame | None = None,
    measure: Measure | None = None,
) -> tuple[SinkCommit | None, Measure]:
    """The processing mode's output, written by the sink, and how to count what the run read
    (`measure`, when the read was counted already); `decoded`: the records as the sink flagged
    them already (`keeps_decoded`). The read is counted above the processor when its output is
    one row per record, else beneath it (`spark_jobs.run_counts`)."""
    drain = ctx.drain
    if measure is None and not counts.may_count_above:  # record mode among them
        read, measure = counts.beneath(read)
    if drain.mode == "record":
        assert measure is not None
        return sink.write_records(spark, ctx, read, _output_schema(drain)), measure
    processed = _decoded(ctx, spark, sink, read, decoded)
    with _failures_named(ctx, spark, sink, processed=True):
        out = _processed(ctx, sink, processed)
        if measure is None:
            above = counts.above(out, processed, read)
            if above is None:  # the output is built again on the counted read
                read, measure = counts.beneath(read)
                out = _processed(ctx, sink, _decoded(ctx, spark, sink, read, None))
            else:
                out, measure = above
        return sink.write(spark, ctx, out), measure


def _decoded(
    ctx: RunContext,
    spark: SparkSession,
    sink: SparkSink,
    read: DataFrame,
    decoded: DataFrame | None,
) -> DataFrame:
    """What the processor (or the sink) gets of the read: the records as typed rows, the bad
    ones handled (`guarded`), where the drain decodes; else the read itself."""
    if not _decodes(ctx.drain):
        return read
    flagged = decoded if decoded is not None else _flagged(ctx, spark, sink, read)
    return guarded(flagged, ctx.drain.bad_records)


def _processed(ctx: RunContext, sink: SparkSink, df: DataFrame) -> DataFrame:
    """The drain's processor applied to `df`, without the metadata only the run reads."""
    drain = ctx.drain
    out = df if drain.processor is None else load_callable(drain.processor, "processor")(df)
    if sink.state_spec(ctx) is None:  # an upsert's collapse drops them, after its ties
        out = out.drop(*drain.unwritten_metadata())
    return out


@contextmanager
def _failures_named(
    ctx: RunContext, spark: SparkSession, sink: SparkSink, processed: bool
) -> Iterator[None]:
    """A failure of the run's Spark work as drainer's own error where it is one: a bad record
    named (`known_bad_record`), a processor's failure (`processed`: the work ran the drain's
    processor); any other as it came."""
    drain = ctx.drain
    try:
        yield
    except Exception as err:
        if (
            isinstance(err, DrainerError)
            or known_failure(err, drain, ctx.settings, sink) is not None
        ):
            raise
        bad = known_bad_record(err, drain.name, ctx.run.id, _reason_of(ctx, spark))
        if bad is not None:
            log.debug("run %d: %s; the Spark error was:", ctx.run.id, bad, exc_info=True)
            raise bad from None
        if drain.processor is None or not processed:
            raise
        raise processor_failed(ctx, err, __file__) from err


def _reason_of(ctx: RunContext, spark: SparkSession) -> ReasonOf:
    """A bad record's reason read again: the record alone, read and decoded as the run's
    read decodes it (`known_bad_record`: the run's job leaves a JSON reason untold)."""

    def reason(topic: str, partition: int, offset: int) -> str | None:
        one = StoredRange(topic, topic_level(topic), partition, offset, offset + 1, "", 1)
        settings = ctx.settings
        read = read_ranges(spark, ctx.drain, settings.bootstrap_servers, [one], home=settings.home)
        found = flag_records(ctx.drain, decode(ctx.drain, read)).where(F.col(ERROR).isNotNull())
        row = found.select(ERROR).first()
        return None if row is None else str(row[0])

    return reason


def _decodes(drain: DrainConfig) -> bool:
    """A drain with a declared value format or a key decoded into a struct, or without a
    processor: typed rows (the value as bytes when no format is declared) plus the metadata
    columns."""
    declared = drain.value is not None or (drain.key is not None and drain.key.format in STRUCTURED)
    return drain.mode == "dataframe" and (declared or drain.processor is None)


def _flagged(ctx: RunContext, spark: SparkSession, sink: SparkSink, df: DataFrame) -> DataFrame:
    """The read decoded, with the records the drain or its sink cannot take marked bad."""
    return sink.flag(spark, ctx, flag_records(ctx.drain, decode(ctx.drain, df)))


def _stage_bad_records(
    ctx: RunContext,
    spark: SparkSession,
    sink: SparkSink,
    df: DataFrame,
    attempt: int,
    decoded: DataFrame | None = None,
) -> None:
    """Bad records as failures of `attempt`: the commit counts the landed attempt's."""
    if _decodes(ctx.drain) and ctx.drain.bad_records == "dead_letter":
        flagged = decoded if decoded is not None else _flagged(ctx, spark, sink, df)
        staged = stage_bad_records(ctx, flagged, attempt)
        if staged:
            log.warning(
                "run %d of drain %s: %d records do not decode; they go to the dead letters",
                ctx.run.id,
                ctx.drain.name,
                staged,
            )


def find_commit(
    drain: DrainConfig, run: StoredRun, settings: Settings, engine: Engine
) -> SinkCommit | None:
    """For `plan abandon`: stop what the plan's attempts left running on the Connect server,
    then look for the plan's commit in its table (a CommitFinder)."""
    sink = spark_sink_for(drain.sink, settings, drain.name)
    spark = get_spark(settings, check=True, sink_conf=sink.session_conf())
    sink.prepare(spark, drain.name)
    # as the next attempt would see it: attempts 1..n are the plan's, all to be stopped
    ctx = RunContext(run, drain, settings, engine, run.attempts + 1)
    stop_earlier_attempts(ctx, spark)
    return sink.committed_anywhere(spark, ctx)


def proof_on_record(ctx: RunContext, sink: SparkSink) -> SinkCommit | None:
    """The run's sink commit as recorded in Postgres when an attempt saw it, or None."""
    with ctx.engine.connect() as conn:
        found = runs.table_proof(conn, ctx.run.id)
    if found is None:
        return None
    attempt, data = found
    commit = SinkCommit.from_dict(data, sink.capabilities.files)
    return None if commit is None else replace(commit, attempt=attempt)


def record_proof(ctx: RunContext, commit: SinkCommit) -> None:
    """Put the run's sink commit on record (fenced: a zombie's write proves nothing new)."""
    with ctx.engine.begin() as conn:
        check_fence(conn, ctx.lease, shared=True)
        runs.record_table_proof(conn, ctx.run.id, commit.attempt, commit.as_dict())


def _check_lease(ctx: RunContext) -> None:
    with ctx.engine.connect() as conn:
        check_fence(conn, ctx.lease, shared=True)


def _output_schema(drain: DrainConfig) -> StructType:
    schema = DataType.fromDDL(drain.output_schema or "")
    if not isinstance(schema, StructType):
        raise ConfigError(f"output_schema {drain.output_schema!r} must list columns")
    return schema


def which_spark(settings: Settings) -> str:
    """The Spark that runs use in this process, in words (`Spark Connect sc://…`)."""
    return describe(get_spark(settings))


def run(
    drain: DrainConfig | str,
    levels: list[int] | None = None,
    trigger: str = "cli",
    dagster_run_id: str | None = None,
    wait_s: float = 0.0,
    launch_key: str | None = None,
    *,
    settings: Settings,
) -> RunResult:
    """One run of a drain: plan (or resume), execute on Spark, commit, mirror."""
    return drain_once(
        drain, execute, levels, trigger, dagster_run_id, wait_s, launch_key, settings=settings
    )
