"""One run of a drain, start to finish: the single code path of the CLI, Dagster and the tests.

lease → mirror leftovers → resume the open plan or plan anew (stored before any read) →
execute (Spark, injected: this package imports no pyspark) → one commit transaction →
mirror offsets to Kafka. A crash anywhere leaves a plan that the next run re-executes with
exactly the same ranges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from sqlalchemy import Engine

from drainer import faults
from drainer.commit import commit_run
from drainer.config import DrainConfig, get_drain
from drainer.dlq import publish_dead_letters
from drainer.kafka_security import redact
from drainer.mirror import MirrorReport, mirror_offsets
from drainer.planning import PartitionState, partition_states, plan_next_run, resolve_levels
from drainer.settings import Settings, load_settings
from drainer.store import get_engine, runs
from drainer.store.leases import Lease, drain_lease
from drainer.store.runs import StoredRun

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


Executor = Callable[[RunContext], None]


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
    # what failed after the commit (mirror, dead-letter publish, backlog lookup): the run's
    # results are committed all the same, and the next run retries these steps
    warnings: list[str] = field(default_factory=list)

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
) -> RunResult:
    """Run the drain once; returns what each level drained. Raises DrainBusy if it is running."""
    drain = get_drain(drain) if isinstance(drain, str) else drain
    levels = resolve_levels(drain, levels)
    settings = load_settings()
    engine = get_engine(settings.database_url)
    started = time.monotonic()
    with drain_lease(engine, drain, wait_s) as lease:
        mirror_offsets(engine, drain)  # heal a mirror that failed after an earlier commit
        with engine.begin() as conn:
            stored = runs.open_run(conn, drain.name)
        resumed = stored is not None
        if stored is not None:
            log.warning(
                "resuming run %d of drain %s (status %s, levels %s): an uncommitted plan is "
                "re-executed with the same ranges before anything new is planned",
                stored.id,
                drain.name,
                stored.status,
                stored.levels,
            )
        else:
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
                        (drain.level_topic(p.level), p.partition): p.offset_map
                        for p in planned.partitions
                    },
                    initial_offsets={
                        (drain.level_topic(p.level), p.partition): p.committed
                        for p in planned.partitions
                        if not p.stored
                    },
                )
                stored = runs.get_run(conn, run_id)
        faults.crash_point("after_plan")
        with engine.begin() as conn:
            attempt = runs.mark_running(conn, lease, stored.id, dagster_run_id)
        try:
            if stored.ranges:
                execute(RunContext(stored, drain, settings, engine, attempt, lease))
            faults.crash_point("after_staging")
            result = commit_run(engine, lease, drain, stored, time.monotonic() - started)
        except BaseException as err:
            try:
                runs.mark_failed(engine, lease, stored.id, f"{type(err).__name__}: {err}")
            except Exception as mark_err:  # never hide the run's own error behind this one
                log.warning("could not mark run %d failed: %s", stored.id, mark_err)
            raise
        faults.crash_point("after_commit")
        warnings: list[str] = []
        mirror = _after_commit(
            warnings, "mirroring offsets to Kafka", lambda: mirror_offsets(engine, drain)
        )
        if mirror is None:
            mirror = MirrorReport(error=warnings[-1])
        elif mirror.error:
            warnings.append(
                f"mirroring offsets to Kafka failed ({mirror.error}); the next run retries"
            )
        _after_commit(
            warnings,
            f"publishing dead letters to {drain.dlq_topic}",
            lambda: publish_dead_letters(drain),
        )
        report = _after_commit(
            warnings,
            "looking up the backlog after the run",
            lambda: _report(engine, stored, partition_states(engine, drain, stored.levels)),
        )
        if report is None:
            report = load_level_reports(stored.id, engine)
    log.info(
        "run %d of drain %s committed: %d records",
        stored.id,
        drain.name,
        sum(outcome.drained for outcome in result.levels.values()),
    )
    return RunResult(
        run_id=stored.id,
        drain=drain.name,
        levels=report,
        resumed=resumed,
        attempt=attempt,
        duration_s=time.monotonic() - started,
        published_rows=result.published_rows,
        mirror=mirror,
        warnings=warnings,
    )


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
