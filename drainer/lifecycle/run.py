"""One run of a drain, start to finish: the single code path of the CLI, Dagster and the tests.

lease → mirror leftovers → decide (`drainer.lifecycle.decision`): report a launch's run, resume
the open plan, finish another open plan first, or plan anew (stored before any read) → execute
(Spark, injected: this package imports no pyspark) → one commit transaction → mirror offsets to
Kafka. A crash anywhere leaves a plan that the next run re-executes with exactly the same ranges.

Requested levels are honoured: an open plan for other levels is finished first (same ranges,
exactly once), then the requested levels are planned and drained in the same call. Launches that
share a launch key (drainer.store.launches) end as one run: the first drains, the others report it.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import Engine

from drainer import faults
from drainer.config import DrainConfig, get_drain
from drainer.kafka.session import KafkaSession
from drainer.lifecycle.decision import LaunchRun, OpenPlan, Step, Verdict, decide
from drainer.lifecycle.execute import execute_plan
from drainer.lifecycle.mirror import mirror_offsets
from drainer.lifecycle.planning import PlannedRun, plan_next_run, resolve_levels
from drainer.lifecycle.results import (
    Executor,
    LevelReport,
    RunContext,
    RunResult,
    committed_result,
    load_level_reports,
)
from drainer.lifecycle.retries import plan_retries
from drainer.lifecycle.topic_identity import record_new_topics, verify_topics
from drainer.settings import Settings
from drainer.store import get_engine, launches, lost_offsets, runs
from drainer.store.leases import Lease, drain_lease
from drainer.store.runs import PlannedLevel, StoredRange, StoredRun

__all__ = [
    "Executor",
    "LevelReport",
    "RunContext",
    "RunResult",
    "committed_result",
    "drain_once",
    "load_level_reports",
]

log = logging.getLogger(__name__)


def drain_once(
    drain: DrainConfig | str,
    execute: Executor,
    levels: list[int] | None = None,
    trigger: str = "cli",
    dagster_run_id: str | None = None,
    wait_s: float = 0.0,
    launch_key: str | None = None,
    *,
    settings: Settings,
) -> RunResult:
    """Run the drain once for `levels`; returns what each of them drained.

    An open plan for other levels (or of another launch) is finished first and returned as
    `result.finished`. With a `launch_key` that an earlier call already drained, nothing is
    drained: that committed run is returned with `shared=True`. Raises DrainBusy if the drain
    is running. `settings`, built once by the caller (the CLI, the Dagster resource), go to
    every step of the run; its fault point (`settings.fault`) arms the crash points.
    """
    with faults.armed_for(settings.fault):
        return _drain_once(
            drain, execute, settings, levels, trigger, dagster_run_id, wait_s, launch_key
        )


def _drain_once(
    drain: DrainConfig | str,
    execute: Executor,
    settings: Settings,
    levels: list[int] | None,
    trigger: str,
    dagster_run_id: str | None,
    wait_s: float,
    launch_key: str | None,
) -> RunResult:
    drain = get_drain(drain, settings.config_path) if isinstance(drain, str) else drain
    levels = resolve_levels(drain, levels)
    engine = get_engine(settings.database_url)
    # one Kafka session for the run's steps (plan, retention, mirror, dead letters), closed at its end
    with drain_lease(engine, drain.row(), wait_s) as lease, KafkaSession(drain, settings) as kafka:
        started = time.monotonic()
        mirror_offsets(engine, drain, kafka)  # heal a mirror that failed after an earlier commit
        open_run, open_plan, launch_run = _open_state(engine, drain.name, launch_key)
        verdict = decide(levels, launch_key, open_plan, launch_run)
        if verdict.step is Step.REPORT:
            return _report_launch(engine, drain.name, launch_key, verdict)
        claim = launch_key if verdict.claim_launch else None
        finished = None
        if verdict.step is Step.FINISH_FIRST:
            assert open_run is not None
            finished = _finish_first(
                engine, lease, kafka, drain, open_run, levels, execute, settings, dagster_run_id
            )
            started = time.monotonic()
        elif verdict.step is Step.PLAN:
            # dead letters `dlq retry` handed back: a run of their own first (no ranges), then
            # the levels' plan as usual
            retry_run = plan_retries(engine, lease, drain, levels, trigger)
            if retry_run is not None:
                finished = execute_plan(
                    engine, lease, kafka, drain, retry_run, execute, settings, dagster_run_id
                )
                started = time.monotonic()
        if verdict.step is Step.RESUME:
            assert open_run is not None
            stored = _resume(engine, kafka, drain, open_run, claim)
        else:
            stored = _plan(engine, lease, kafka, drain, levels, trigger, claim)
        phases = {"plan": time.monotonic() - started}
        result = execute_plan(
            engine, lease, kafka, drain, stored, execute, settings, dagster_run_id, phases, started
        )
    result.resumed = verdict.step is Step.RESUME
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


# --- before the decision: what is open ----------------------------------------------------------


def _open_state(
    engine: Engine, drain: str, launch_key: str | None
) -> tuple[StoredRun | None, OpenPlan | None, LaunchRun | None]:
    """The drain's open plan (as stored and as the decision sees it) and the launch's run."""
    with engine.begin() as conn:
        found = launches.run_for_launch(conn, drain, launch_key) if launch_key else None
        stored = runs.open_run(conn, drain)
        stored_key = launches.launch_key_of(conn, stored.id) if stored else None
    open_plan = None if stored is None else OpenPlan(stored.id, stored.levels, stored_key)
    return stored, open_plan, None if found is None else LaunchRun(*found)


# --- acting on the verdict ----------------------------------------------------------------------


def _report_launch(
    engine: Engine, drain: str, launch_key: str | None, verdict: Verdict
) -> RunResult:
    assert verdict.run_id is not None
    log.info(
        "drain %s: launch %s was drained by run %d; reporting that run",
        drain,
        launch_key,
        verdict.run_id,
    )
    return committed_result(engine, drain, verdict.run_id, shared=True)


def _finish_first(
    engine: Engine,
    lease: Lease,
    kafka: KafkaSession,
    drain: DrainConfig,
    stored: StoredRun,
    levels: list[int],
    execute: Executor,
    settings: Settings,
    dagster_run_id: str | None,
) -> RunResult:
    """Finish an open plan that is not this call's, with its own ranges, before planning."""
    log.warning(
        "drain %s: run %d (levels %s) is not committed; finishing it with the same "
        "ranges before planning levels %s",
        drain.name,
        stored.id,
        stored.levels,
        levels,
    )
    verify_topics(engine, drain, kafka, stored.levels, True)  # as a resume checks its own
    finished = execute_plan(engine, lease, kafka, drain, stored, execute, settings, dagster_run_id)
    finished.resumed = True
    return finished


def _resume(
    engine: Engine, kafka: KafkaSession, drain: DrainConfig, stored: StoredRun, claim: str | None
) -> StoredRun:
    """This call's run is the open plan: check its topics, name its launch, execute it again."""
    verify_topics(engine, drain, kafka, stored.levels, True)
    log.warning(
        "resuming run %d of drain %s (status %s, levels %s): an uncommitted plan is "
        "re-executed with the same ranges before anything new is planned",
        stored.id,
        drain.name,
        stored.status,
        stored.levels,
    )
    if claim:
        with engine.begin() as conn:
            launches.claim(conn, stored.id, claim)
    return stored


def _plan(
    engine: Engine,
    lease: Lease,
    kafka: KafkaSession,
    drain: DrainConfig,
    levels: list[int],
    trigger: str,
    claim: str | None,
) -> StoredRun:
    """Plan the levels from live state and store the plan before anything is read."""
    live_topics = verify_topics(engine, drain, kafka, levels, False)
    planned = plan_next_run(engine, drain, kafka, levels)
    with engine.begin() as conn:
        run_id = runs.write_plan(
            conn,
            lease,
            drain.name,
            drain.budget if planned.budget is None else planned.budget.budget,
            drain.mode,
            planned.levels,
            trigger,
            _level_numbers(planned),
            _ranges(drain, planned),
            initial_offsets={
                (drain.level_topic(p.level), p.partition): p.committed
                for p in planned.partitions
                if not p.stored
            },
        )
        # retention passed these committed offsets: the skip commits with the run
        lost_offsets.record_losses(
            conn,
            drain.name,
            run_id,
            "committed",
            [p.loss for p in planned.partitions if p.loss is not None],
        )
        record_new_topics(conn, drain.name, live_topics)
        if claim:
            launches.claim(conn, run_id, claim)
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


def _level_numbers(planned: PlannedRun) -> list[PlannedLevel]:
    return [
        PlannedLevel(lp.level, lp.reserved, lp.burst, lp.allocated, lp.backlog, lp.planned)
        for lp in planned.plan.levels.values()
    ]


def _ranges(drain: DrainConfig, planned: PlannedRun) -> list[StoredRange]:
    """The plan's ranges as stored, each with the offset map its partition starts from."""
    start_maps = {(p.level, p.partition): p.progress.encoded() for p in planned.partitions}
    return [
        StoredRange(
            drain.level_topic(pr.level),
            pr.level,
            pr.partition,
            pr.start,
            pr.end,
            start_maps.get((pr.level, pr.partition), ""),
            pr.records,
        )
        for pr in planned.plan.ranges
    ]
