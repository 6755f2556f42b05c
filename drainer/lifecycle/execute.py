"""A stored plan carried out: attempt, execute, commit, then mirror and report.

Everything up to the commit fails the run (marked failed; the plan stays and the next run
resumes it with the same ranges). Everything after the commit is a warning on the committed
run, retried by the next run: mirroring offsets to Kafka, publishing dead letters, the backlog.

Two durations are stored: `runs.duration_s` inside the commit (plan through the Spark job, all
the commit can know) and, in a small update once the after-commit steps are done, the whole
slot `runs.slot_s` (`started`, just after the lease, through mirror, upkeep and the backlog
report), which time-boxed runs (`run_seconds`) measure throughput by.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine

from drainer import faults
from drainer.config import DrainConfig
from drainer.config.kafka_clients import redact
from drainer.errors import ServiceUnavailable
from drainer.kafka.session import KafkaSession
from drainer.lifecycle.commit import CommitResult, commit_run
from drainer.lifecycle.dlq import publish_dead_letters
from drainer.lifecycle.failures import run_failure
from drainer.lifecycle.mirror import MirrorReport, mirror_offsets
from drainer.lifecycle.planning import PartitionState, partition_states
from drainer.lifecycle.results import (
    ExecutionResult,
    Executor,
    LevelReport,
    RunContext,
    RunResult,
    load_level_reports,
)
from drainer.lifecycle.retention_gaps import measure_ranges
from drainer.lifecycle.upkeep import after_commit_upkeep
from drainer.settings import Settings
from drainer.sinks.routed import rows_per_table
from drainer.store import launches, lost_offsets, route_tables, runs, throughput, upserts
from drainer.store.leases import Lease, check_fence
from drainer.store.runs import StoredRun

log = logging.getLogger(__name__)
T = TypeVar("T")


def execute_plan(
    engine: Engine,
    lease: Lease,
    kafka: KafkaSession,
    drain: DrainConfig,
    stored: StoredRun,
    execute: Executor,
    settings: Settings,
    dagster_run_id: str | None,
    phases: dict[str, float] | None = None,
    started: float | None = None,
) -> RunResult:
    """Execute a stored plan, commit it, mirror it: the run's steps after planning."""
    phases = dict(phases or {"plan": 0.0})
    started = time.monotonic() if started is None else started
    faults.crash_point("after_plan")
    ctx = _start_attempt(engine, lease, kafka, drain, stored, settings, dagster_run_id)
    try:
        executed = _process(ctx, execute, phases)
        faults.crash_point("after_staging")
        result = _commit(ctx, lease, started, executed, phases)
    except BaseException as err:
        _record_failure(engine, lease, drain, stored, ctx.attempt, err)
        raise
    try:
        return _after_the_commit(
            engine, kafka, drain, stored, ctx, result, executed, phases, started
        )
    except KeyboardInterrupt as err:
        err.committed_run = stored.id  # type: ignore[attr-defined]  # read by the CLI's one line
        raise


def _after_the_commit(
    engine: Engine,
    kafka: KafkaSession,
    drain: DrainConfig,
    stored: StoredRun,
    ctx: RunContext,
    result: CommitResult,
    executed: ExecutionResult,
    phases: dict[str, float],
    started: float,
) -> RunResult:
    """Mirror, publish dead letters, keep the drain bounded, report: warnings, not failures."""
    faults.crash_point("after_commit")
    # the run is committed: what fails from here on is a warning, retried by the next run
    warnings: list[str] = []
    mirror = _mirror_and_publish(engine, kafka, drain, stored, warnings, phases)
    faults.crash_point(faults.MIRROR_POINT)
    t0 = time.monotonic()
    _after_commit(
        warnings, "keeping the drain bounded", lambda: after_commit_upkeep(engine, drain, ctx.sink)
    )
    phases["upkeep"] = time.monotonic() - t0
    report = _after_commit(
        warnings,
        "looking up the backlog after the run",
        lambda: _report(engine, stored, partition_states(engine, drain, stored.levels, kafka)),
    )
    if report is None:
        report = load_level_reports(stored.id, engine)
    table_commit = executed.table_commit.as_dict() if executed.table_commit else {}
    # the whole slot, for time-boxed runs: after the commit, in its own short update
    slot_s = time.monotonic() - started
    with engine.begin() as conn:
        launches.store_phases(conn, stored.id, phases)
        added = runs.columns_added(conn, stored.id)
        counts = upserts.stored_counts(conn, stored.id)
        published = route_tables.runs_rows(conn, [stored.id]).get(stored.id, {})
        throughput.store_slot(conn, stored.id, slot_s)
    return RunResult(
        run_id=stored.id,
        drain=drain.name,
        levels=report,
        resumed=False,
        attempt=ctx.attempt,
        duration_s=slot_s,
        published_rows=result.published_rows,
        mirror=mirror,
        phases={k: round(v, 3) for k, v in phases.items()},
        warnings=warnings,
        table_commit=table_commit,
        columns_added=added,
        # a Postgres merge's counts as recorded, else those the table commit carries
        upsert=counts or dict(table_commit.get("details", {}).get("upsert", {})),
        table_rows=rows_per_table(published, table_commit),
        retried=0 if result.retries is None else result.retries.total_retried,
        dead_again=0 if result.retries is None else result.retries.total_dead_again,
    )


def _start_attempt(
    engine: Engine,
    lease: Lease,
    kafka: KafkaSession,
    drain: DrainConfig,
    stored: StoredRun,
    settings: Settings,
    dagster_run_id: str | None,
) -> RunContext:
    """Measure the ranges against retention and mark the run running: one more attempt."""
    # what retention deleted inside the plan's ranges since it was planned: read past it
    plan_losses, read_from = measure_ranges(drain, stored.ranges, kafka)
    with engine.begin() as conn:
        attempt = runs.mark_running(conn, lease, stored.id, dagster_run_id)
        check_fence(conn, lease)
        lost_offsets.record_losses(conn, drain.name, stored.id, "plan", plan_losses)
    return RunContext(stored, drain, settings, engine, attempt, lease, read_from=read_from)


def _process(ctx: RunContext, execute: Executor, phases: dict[str, float]) -> ExecutionResult:
    """Read and process the plan's ranges; the executor writes the sink."""
    t0 = time.monotonic()
    clear_run_outputs(ctx)  # also when retention left nothing to read: no stale stage
    # with nothing to read, a sink that commits before Postgres is still asked whether an
    # earlier attempt's commit holds the run (only the executor can look); a first attempt
    # has no earlier one, so an empty run needs no Spark
    asks_sink = ctx.sink.capabilities.commit == "before_postgres" and ctx.attempt > 1
    if not (ctx.readable_ranges() or ctx.run.retries or asks_sink):
        # no Spark job: its phases say 0, not the time clearing the stage took
        phases["spark_start"] = phases["spark_job"] = 0.0
        return ExecutionResult(read={})
    executed = execute(ctx)
    job_s = time.monotonic() - t0
    phases["spark_start"] = executed.spark_start_s
    phases["spark_job"] = max(0.0, job_s - phases["spark_start"])
    for step, seconds in (executed.sink_steps or {}).items():
        phases[f"sink.{step}"] = seconds  # inside spark_job: where the sink's part went
    return executed


def _commit(
    ctx: RunContext,
    lease: Lease,
    started: float,
    executed: ExecutionResult,
    phases: dict[str, float],
) -> CommitResult:
    drain, stored = ctx.drain, ctx.run
    t0 = time.monotonic()
    result = commit_run(
        ctx.engine,
        lease,
        drain,
        ctx.sink,
        stored,
        time.monotonic() - started,
        executed,
    )
    phases["commit"] = time.monotonic() - t0
    log.info(
        "run %d of drain %s: committed %d records (Spark start %.2f s, job %.2f s, commit %.2f s)",
        stored.id,
        drain.name,
        sum(outcome.drained for outcome in result.levels.values()),
        phases["spark_start"],
        phases["spark_job"],
        phases["commit"],
    )
    return result


def _record_failure(
    engine: Engine,
    lease: Lease,
    drain: DrainConfig,
    stored: StoredRun,
    attempt: int,
    err: BaseException,
) -> None:
    """Mark the run failed (best effort); a plan that keeps failing says how to end it."""
    try:
        runs.mark_failed(engine, lease, stored.id, redact(failure_reason(err)))
    except Exception as mark_err:  # never hide the run's own error behind this one
        # a lost service fails this too: its one message already says so, this is detail
        level = logging.DEBUG if isinstance(err, ServiceUnavailable) else logging.WARNING
        log.log(level, "could not mark run %d failed: %s", stored.id, mark_err)
    failure = run_failure(drain.name, stored.id, attempt, err)
    if failure is not None:
        raise failure from err


def failure_reason(err: BaseException) -> str:
    """What `drainer status` shows for a failed attempt: `Type: message`, or for Ctrl-C (whose
    message is empty) what happened and what comes next."""
    if isinstance(err, KeyboardInterrupt):
        return "interrupted (Ctrl-C) before the commit; the next run resumes the plan"
    return f"{type(err).__name__}: {err}"


def _mirror_and_publish(
    engine: Engine,
    kafka: KafkaSession,
    drain: DrainConfig,
    stored: StoredRun,
    warnings: list[str],
    phases: dict[str, float],
) -> MirrorReport:
    """Mirror offsets to Kafka and publish dead letters; failures become the run's warnings."""
    t0 = time.monotonic()
    # a covered level with records waiting gets a commit, moved or not: lag monitors see a live
    # consumer (`drainer.lifecycle.mirror` says why an empty one waits for REFRESH_S)
    mirror = _after_commit(
        warnings,
        "mirroring offsets to Kafka",
        lambda: mirror_offsets(engine, drain, kafka, levels=stored.levels, run_id=stored.id),
    )
    if mirror is None:
        mirror = MirrorReport(error=warnings[-1])
    elif mirror.error:
        warnings.append(f"mirroring offsets to Kafka failed ({mirror.error}); the next run retries")
    _after_commit(
        warnings,
        f"publishing dead letters to {drain.dlq_topic}",
        lambda: publish_dead_letters(engine, drain, kafka),
    )
    phases["mirror"] = time.monotonic() - t0
    return mirror


def clear_run_outputs(ctx: RunContext) -> None:
    """A resumed run starts afresh: drop what an earlier attempt left that is not the run's
    (the sink says what: a stage, failures no table commit took).

    Before every execution, whether or not anything is left to read, so a commit never
    publishes a crashed attempt's stage. Fenced like the tasks' writes, so a zombie attempt
    cannot wipe the staging of the run that took its plan over.
    """
    with ctx.engine.begin() as conn:
        check_fence(conn, ctx.lease, shared=True)
        ctx.sink.prepare_attempt(conn, ctx.run, ctx.read_from)


def _after_commit(warnings: list[str], step: str, call: Callable[[], T]) -> T | None:
    """Run a step after the commit: a failure is a warning on the committed run, not an error."""
    try:
        return call()
    except Exception as err:
        log.debug("%s failed after the commit", step, exc_info=True)
        warnings.append(
            f"{step} failed ({redact(str(err))}); the run is committed, the next run retries"
        )
        log.warning("%s", warnings[-1])
        return None


def _report(engine: Engine, run: StoredRun, after: list[PartitionState]) -> list[LevelReport]:
    backlog_after: dict[int, int] = {}
    for p in after:
        backlog_after[p.level] = backlog_after.get(p.level, 0) + p.backlog
    with engine.begin() as conn:
        runs.store_backlog_after(conn, run.id, backlog_after)
    return load_level_reports(run.id, engine)
