"""One run of a drain, start to finish: the single code path of the CLI, Dagster and the tests.

lease → mirror leftovers → finish an open plan for other levels, or resume the open plan for
these levels, or plan anew (stored before any read) → execute (Spark, injected: this package
imports no pyspark) → one commit transaction → mirror offsets to Kafka. A crash anywhere leaves a
plan that the next run re-executes with exactly the same ranges.

Requested levels are honoured: an open plan for other levels is finished first (same ranges,
exactly once), then the requested levels are planned and drained in the same call. Launches that
share a launch key (drainer.store.launches) end as one run: the first drains, the others report it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Engine

from drainer import faults
from drainer.config import DrainConfig, get_drain
from drainer.config.kafka_clients import redact
from drainer.errors import DrainBusy, FencedOut, PlanKeepsFailing, ServiceUnavailable
from drainer.kafka.mirror import MirrorReport, mirror_offsets
from drainer.kafka.topic_identity import record_new_topics, verify_topics
from drainer.lifecycle.commit import commit_run
from drainer.lifecycle.dlq import publish_dead_letters
from drainer.lifecycle.planning import (
    PartitionState,
    partition_states,
    plan_next_run,
    resolve_levels,
)
from drainer.lifecycle.retention import measure_ranges
from drainer.settings import Settings, load_settings
from drainer.store import get_engine, launches, retention, runs
from drainer.store.leases import Lease, check_fence, drain_lease
from drainer.store.runs import StoredRange, StoredRun

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RunContext:
    """What an executor needs to process one stored plan."""

    run: StoredRun
    drain: DrainConfig
    settings: Settings
    engine: Engine
    attempt: int
    lease: Lease | None = None  # staging writes check its fence: a zombie run cannot touch them
    # seconds the executor spent on named phases; it sets "spark_start" (session start-up)
    phases: dict[str, float] = field(default_factory=dict)
    # where each range's read starts: past what retention deleted (drainer.lifecycle.retention);
    # ranges missing here start at their planned start
    read_from: dict[tuple[str, int], int] = field(default_factory=dict)
    # a lakehouse sink's table commit, set by the executor: format, location, version,
    # files_added, bytes_added, rows_added (spark_jobs.lakehouse.TableCommit)
    table_commit: dict[str, Any] = field(default_factory=dict)

    def readable_ranges(self) -> list[StoredRange]:
        """The run's ranges that still have offsets to read."""
        return [
            r
            for r in self.run.ranges
            if self.read_from.get((r.topic, r.partition), r.start) < r.end
        ]


Executor = Callable[[RunContext], Mapping[tuple[str, int], int] | None]
"""Processes a stored plan; returns how many records it read per (topic, partition).

Offsets are not records: transaction markers and aborted records (read_committed) leave gaps,
so the commit counts what was read. `None` means "every planned offset was a record".
"""


@dataclass
class LevelReport:
    level: int
    reserved: int
    burst: int
    allocated: int
    backlog_before: int
    planned: int
    drained: int
    failed: int
    dead_lettered: int
    fill_ratio: float
    backlog_after: int
    lost_to_retention: int = 0  # offsets Kafka deleted before this run could drain them


@dataclass
class RunResult:
    run_id: int
    drain: str
    levels: list[LevelReport]
    resumed: bool
    attempt: int
    duration_s: float
    published_rows: int
    mirror: MirrorReport = field(default_factory=MirrorReport)
    # seconds per phase: plan, spark_start, spark_job, commit, mirror
    phases: dict[str, float] = field(default_factory=dict)
    # an open plan for other levels that this call finished before planning its own levels
    finished: RunResult | None = None
    # True when an earlier launch with the same launch key drained this run; nothing new drained
    shared: bool = False
    # what failed after the commit (mirror, dead-letter publish, backlog lookup): the run's
    # results are committed all the same, and the next run retries these steps
    warnings: list[str] = field(default_factory=list)
    # a lakehouse sink's table commit of this run (format, location, version, files and bytes
    # added); empty for a Postgres sink
    table_commit: dict[str, Any] = field(default_factory=dict)

    @property
    def drained(self) -> int:
        return sum(level.drained for level in self.levels)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["drained"] = self.drained
        return data


def drain_once(
    drain: DrainConfig | str,
    execute: Executor,
    levels: list[int] | None = None,
    trigger: str = "cli",
    dagster_run_id: str | None = None,
    wait_s: float = 0.0,
    launch_key: str | None = None,
) -> RunResult:
    """Run the drain once for `levels`; returns what each of them drained.

    An open plan for other levels (or of another launch) is finished first and returned as
    `result.finished`. With a `launch_key` that an earlier call already drained, nothing is
    drained: that committed run is returned with `shared=True`. Raises DrainBusy if the drain
    is running.
    """
    drain = get_drain(drain) if isinstance(drain, str) else drain
    levels = resolve_levels(drain, levels)
    settings = load_settings()
    engine = get_engine(settings.database_url)
    with drain_lease(engine, drain, wait_s) as lease:
        started = time.monotonic()
        mirror_offsets(engine, drain)  # heal a mirror that failed after an earlier commit
        with engine.begin() as conn:
            done = launches.run_for_launch(conn, drain.name, launch_key) if launch_key else None
            stored = runs.open_run(conn, drain.name)
            stored_key = launches.launch_key_of(conn, stored.id) if stored else None
        if done is not None and done[1] == "committed":
            log.info(
                "drain %s: launch %s was drained by run %d; reporting that run",
                drain.name,
                launch_key,
                done[0],
            )
            return committed_result(engine, drain.name, done[0], shared=True)
        finished = None
        if stored is not None and (stored.levels != levels or stored_key not in (None, launch_key)):
            log.warning(
                "drain %s: run %d (levels %s) is not committed; finishing it with the same "
                "ranges before planning levels %s",
                drain.name,
                stored.id,
                stored.levels,
                levels,
            )
            finished = _execute(engine, lease, drain, stored, execute, settings, dagster_run_id)
            finished.resumed = True
            started, stored = time.monotonic(), None
        resumed = stored is not None
        live_topics = verify_topics(engine, drain, stored.levels if resumed else levels, resumed)
        if stored is not None:
            log.warning(
                "resuming run %d of drain %s (status %s, levels %s): an uncommitted plan is "
                "re-executed with the same ranges before anything new is planned",
                stored.id,
                drain.name,
                stored.status,
                stored.levels,
            )
            if launch_key:
                with engine.begin() as conn:
                    launches.claim(conn, stored.id, launch_key)
        else:
            stored = _plan(engine, lease, drain, levels, trigger, launch_key, live_topics)
        phases = {"plan": time.monotonic() - started}
        result = _execute(
            engine, lease, drain, stored, execute, settings, dagster_run_id, phases, started
        )
    result.resumed = resumed
    result.finished = finished
    log.info(
        "run %d of drain %s committed: %d records in %.1f s (%s)",
        result.run_id,
        drain.name,
        result.drained,
        result.duration_s,
        ", ".join(f"{name} {seconds:.2f} s" for name, seconds in result.phases.items()),
    )
    return result


def _plan(
    engine: Engine,
    lease: Lease,
    drain: DrainConfig,
    levels: list[int],
    trigger: str,
    launch_key: str | None,
    live_topics: Any,
) -> StoredRun:
    planned = plan_next_run(engine, drain, levels)
    with engine.begin() as conn:
        run_id = runs.write_plan(
            conn,
            lease,
            drain,
            planned.plan,
            planned.levels,
            trigger,
            start_maps={
                (drain.level_topic(p.level), p.partition): p.offset_map for p in planned.partitions
            },
            initial_offsets={
                (drain.level_topic(p.level), p.partition): p.committed
                for p in planned.partitions
                if not p.stored
            },
        )
        # retention passed these committed offsets: the skip commits with the run
        retention.record_losses(
            conn,
            drain.name,
            run_id,
            "committed",
            [p.loss for p in planned.partitions if p.loss is not None],
        )
        record_new_topics(conn, drain.name, live_topics)
        if launch_key:
            launches.claim(conn, run_id, launch_key)
        stored = runs.get_run(conn, run_id)
    log.info(
        "planned run %d of drain %s: levels %s, %d records in %d ranges",
        run_id,
        drain.name,
        stored.levels,
        sum(r.records for r in stored.ranges),
        len(stored.ranges),
    )
    return stored


def _execute(
    engine: Engine,
    lease: Lease,
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
    # what retention deleted inside the plan's ranges since it was planned: read past it
    plan_losses, read_from = measure_ranges(drain, stored.ranges)
    with engine.begin() as conn:
        attempt = runs.mark_running(conn, lease, stored.id, dagster_run_id)
        check_fence(conn, lease)
        retention.record_losses(conn, drain.name, stored.id, "plan", plan_losses)
    ctx = RunContext(stored, drain, settings, engine, attempt, lease, read_from=read_from)
    try:
        t0 = time.monotonic()
        present = execute(ctx) if ctx.readable_ranges() else {}
        job_s = time.monotonic() - t0
        phases["spark_start"] = ctx.phases.get("spark_start", 0.0)
        phases["spark_job"] = max(0.0, job_s - phases["spark_start"])
        faults.crash_point("after_staging")
        t0 = time.monotonic()
        result = commit_run(
            engine,
            lease,
            drain,
            stored,
            time.monotonic() - started,
            present=present,
            table_commit=ctx.table_commit,
        )
        phases["commit"] = time.monotonic() - t0
    except BaseException as err:
        try:
            runs.mark_failed(engine, lease, stored.id, f"{type(err).__name__}: {err}")
        except Exception as mark_err:  # never hide the run's own error behind this one
            # a lost service fails this too: its one message already says so, this is detail
            level = logging.DEBUG if isinstance(err, ServiceUnavailable) else logging.WARNING
            log.log(level, "could not mark run %d failed: %s", stored.id, mark_err)
        if _repeated_failure(err, attempt):
            raise PlanKeepsFailing(
                f"run {stored.id} of drain '{drain.name}' failed {attempt} attempts with the "
                f"same plan; the last one: {type(err).__name__}: {_one_line(err)}. Fix the "
                f"cause and run again, or end the plan with `drainer plan abandon "
                f"{drain.name} --reason TEXT` (audited; commits nothing) so that the next "
                "run plans afresh."
            ) from err
        raise
    log.info(
        "run %d of drain %s: committed %d records (Spark start %.2f s, job %.2f s, commit %.2f s)",
        stored.id,
        drain.name,
        sum(outcome.drained for outcome in result.levels.values()),
        phases["spark_start"],
        phases["spark_job"],
        phases["commit"],
    )
    faults.crash_point("after_commit")
    # the run is committed: what fails from here on is a warning, retried by the next run
    warnings: list[str] = []
    t0 = time.monotonic()
    # every covered level's group gets a commit, moved or not: lag monitors see a live consumer
    mirror = _after_commit(
        warnings,
        "mirroring offsets to Kafka",
        lambda: mirror_offsets(engine, drain, levels=stored.levels),
    )
    if mirror is None:
        mirror = MirrorReport(error=warnings[-1])
    elif mirror.error:
        warnings.append(f"mirroring offsets to Kafka failed ({mirror.error}); the next run retries")
    _after_commit(
        warnings,
        f"publishing dead letters to {drain.dlq_topic}",
        lambda: publish_dead_letters(drain),
    )
    phases["mirror"] = time.monotonic() - t0
    report = _after_commit(
        warnings,
        "looking up the backlog after the run",
        lambda: _report(engine, stored, partition_states(engine, drain, stored.levels)),
    )
    if report is None:
        report = load_level_reports(stored.id, engine)
    with engine.begin() as conn:
        launches.store_phases(conn, stored.id, phases)
    return RunResult(
        run_id=stored.id,
        drain=drain.name,
        levels=report,
        resumed=False,
        attempt=attempt,
        duration_s=time.monotonic() - started,
        published_rows=result.published_rows,
        mirror=mirror,
        phases={k: round(v, 3) for k, v in phases.items()},
        warnings=warnings,
        table_commit=ctx.table_commit,
    )


def committed_result(engine: Engine, drain: str, run_id: int, shared: bool = False) -> RunResult:
    """A committed run as stored, e.g. for the launches that share it."""
    with engine.connect() as conn:
        summary = launches.run_summary(conn, run_id)
        phases = launches.load_phases(conn, run_id)
    return RunResult(
        run_id=run_id,
        drain=drain,
        levels=load_level_reports(run_id, engine),
        resumed=False,
        attempt=summary["attempts"],
        duration_s=summary["duration_s"] or 0.0,
        published_rows=0,
        phases=phases,
        shared=shared,
    )


def _repeated_failure(err: BaseException, attempt: int) -> bool:
    """A resumed plan failed again for a reason abandoning it could address.

    Not: a first attempt, an interrupt, a lost lease, another run holding the drain, or a
    service that is down (abandoning would not bring it back).
    """
    return (
        attempt > 1
        and isinstance(err, Exception)
        and not isinstance(err, FencedOut | DrainBusy | ServiceUnavailable | PlanKeepsFailing)
    )


def _one_line(err: BaseException) -> str:
    """The error's text on one line, shortened (a Spark error can run to hundreds of lines)."""
    text = " ".join(str(err).split())
    return text if len(text) <= 300 else text[:300] + "…"


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


def load_level_reports(run_id: int, engine: Engine | None = None) -> list[LevelReport]:
    """A run's per-level numbers as stored, highest level first."""
    engine = engine or get_engine()
    with engine.connect() as conn:
        return [LevelReport(**row) for row in runs.level_rows(conn, run_id)]
