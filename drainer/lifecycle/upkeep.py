"""Keeping a drain bounded over a year of runs: its sink's upkeep, its history.

Run after every commit (failures are warnings, the next run retries) and by `drainer maintain`.
The sink keeps itself bounded (`Sink.upkeep` after a commit, `Sink.maintain` to the end: a
Postgres sink folds its run partitions, drainer.sinks.postgres_folds); this module adds the
history both share.

**History.** Run detail older than the drain's `history_days` is pruned to per-day totals
(drainer.store.pruning), at most once an hour after a commit, in batches of PRUNE_BATCH runs,
each batch one transaction (its totals and its deletes commit together).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from drainer import faults
from drainer.config import DrainConfig
from drainer.settings import Settings
from drainer.sinks import Sink, UpkeepReport, sink_for
from drainer.store import get_engine, pruning, runs
from drainer.store.leases import drain_lease

log = logging.getLogger(__name__)

PRUNE_BATCH = 5000  # runs pruned per transaction


@dataclass
class PruneReport:
    """What pruning a drain's history removed (0s when it was not due)."""

    runs: int = 0
    dead_letters: int = 0
    attempts: int = 0


def prune_history(engine: Engine, drain: DrainConfig, hourly: bool = False) -> PruneReport:
    """Prune the drain's run detail older than `history_days` to totals (see the docstring).

    `hourly`: only when the last prune after a commit is an hour old (upkeep after a commit).
    """
    report = PruneReport()
    if hourly:
        with engine.begin() as conn:
            if not pruning.claim_hourly(conn, drain.name):
                return report
    while True:
        with engine.begin() as conn:
            ids = pruning.prunable_runs(
                conn, drain.name, drain.history_days, drain.history_window, PRUNE_BATCH
            )
            report.runs += pruning.prune_runs(conn, ids)
        if len(ids) < PRUNE_BATCH:
            break
    with engine.begin() as conn:
        report.dead_letters = pruning.prune_dead_letters(conn, drain.name, drain.history_days)
        report.attempts = pruning.prune_attempts(conn, drain.name, drain.history_days)
    if report.runs or report.dead_letters or report.attempts:
        log.info(
            "drain %s: pruned %d runs, %d dead letters, %d attempt counts older than %d days",
            drain.name,
            report.runs,
            report.dead_letters,
            report.attempts,
            drain.history_days,
        )
    return report


def after_commit_upkeep(engine: Engine, drain: DrainConfig, sink: Sink[Any]) -> None:
    """What every committed run does to keep the drain bounded (a failure is a warning)."""
    sink.upkeep(engine)
    prune_history(engine, drain, hourly=True)


TableMaintainer = Callable[[DrainConfig, float | None], dict[str, Any]]
"""Compacts and expires a table on Spark (spark_jobs.table_maintenance), injected: no pyspark here.
Its second argument is the hours it must keep at least (an open plan's commit), or None."""


@dataclass
class MaintainReport:
    """What `drainer maintain` did for one drain."""

    drain: str
    sink: UpkeepReport
    history: PruneReport
    # a table format's compaction and expiry (format, location, files, retention), if any
    table: dict[str, Any] | None = None


def maintain_drain(
    drain: DrainConfig,
    wait_s: float = 0.0,
    table: TableMaintainer | None = None,
    *,
    settings: Settings,
) -> MaintainReport:
    """Everything upkeep does, to the end, under the drain's lease (DrainBusy while it runs).

    `table`, for a sink with table maintenance, runs under the same lease, so it never works
    on a table while a run of the drain writes it or looks for its commit there. A fold's
    crash points are armed with `settings.fault`.
    """
    engine = get_engine(settings.database_url)
    sink = sink_for(drain.sink, settings, drain.name)
    with faults.armed_for(settings.fault), drain_lease(engine, drain.row(), wait_s):
        folded = sink.maintain(engine)
        history = prune_history(engine, drain)
        done = None
        if table is not None and sink.capabilities.table_maintenance:
            done = table(drain, _hours_to_keep(engine, drain))
        return MaintainReport(drain.name, folded, history, done)


def _hours_to_keep(engine: Engine, drain: DrainConfig) -> float | None:
    """Hours back to the drain's open plan, whose table commit (an attempt's, before the
    crash that left the plan open) is the proof its resumed run looks for: no compaction or
    expiry may remove what was committed since. None without an open plan."""
    with engine.connect() as conn:
        found = runs.oldest_open_plan(conn, drain.name)
    if found is None:
        return None
    _, planned_at = found
    # an hour's margin for clocks and the time maintenance itself takes
    return (datetime.now(UTC) - planned_at).total_seconds() / 3600 + 1.0
