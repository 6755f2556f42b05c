"""Keeping a drain bounded over a year of runs: its sink's partitions, its history.

Run after every commit (failures are warnings, the next run retries) and by `drainer maintain`.

**Sink partitions.** A commit attaches one partition per run (cheap, inside the commit; readers
are not blocked). Folding then keeps the count low, size-tiered like an LSM tree: a
partition holding fewer than FANOUT runs is tier 0, fewer than FANOUT² tier 1, and so on;
whenever a tier has FANOUT partitions, its oldest FANOUT are folded into one of the next tier
(drainer.store.sink_folds: one transaction, readers wait only for the catalog swap). So a
target keeps at most FANOUT - 1 partitions per tier below the top one (see MAX_FOLD_RUNS), and
each row is copied once per tier it climbs, at most 3 times over its whole life.

**A partition lists at most MAX_FOLD_RUNS runs.** A partition's bound is stored in its
`pg_class` row, which Postgres cannot TOAST: a LIST of about 800 run ids (7-digit ids) no longer
fits in a page ("row is too big"), so a tier-4 fold (4,096 ids) cannot be attached. Folds stop
at tier 3 (512 runs), and tier-3 partitions accumulate: one per 512 runs after the first 4,096
(about 200 a year at one run every five minutes). Bounding that needs a different partition
bound for old runs (docs/operations.md, "Limit: tier 3 is the top").

**Big folds stay out of the runs.** A fold in upkeep adds to that run's time, under the lease:
a tier-3 fold copies 512 runs of rows (1.8 s at 1,000 rows a run, 42 s at 10,000:
benchmarks/README.md, fold_tiers). So upkeep makes only folds of at most UPKEEP_FOLD_BYTES; a
bigger one waits for `drainer maintain` (run it daily for such a drain). Without it the count
stays bounded all the same: upkeep makes a deferred fold anyway once its tier holds 2 x FANOUT
partitions, so a tier below the top never holds more than 2 x FANOUT - 1.

**History.** Run detail older than the drain's `history_days` is pruned to per-day totals
(drainer.store.pruning), at most once an hour after a commit, in batches of PRUNE_BATCH runs,
each batch one transaction (its totals and its deletes commit together).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Engine

from drainer import faults
from drainer.config import DrainConfig
from drainer.store import get_engine, pruning, sink_folds, sinks
from drainer.store.leases import drain_lease
from drainer.store.sink_folds import SinkPartition

log = logging.getLogger(__name__)

FANOUT = 8  # partitions of one tier folded into one of the next
MAX_FOLD_RUNS = FANOUT**3  # run ids one LIST bound can hold (pg_class rows are not TOASTed)
AFTER_COMMIT_STEPS = 16  # folds after one commit; a backlog of partitions shrinks over runs
# the biggest fold (its sources' bytes, indexes included) upkeep makes inside a run: a few
# seconds of copying (14-35 MB/s in benchmarks/README.md, fold_tiers), about 1% of a
# five-minute slot; bigger ones wait for `drainer maintain` until their tier is twice full
UPKEEP_FOLD_BYTES = 64 * 1024 * 1024
LOCK_TIMEOUT_S = 5.0  # longest wait for the target's readers before a fold gives up
PRUNE_BATCH = 5000  # runs pruned per transaction


@dataclass
class FoldReport:
    """What folding a target did: partitions before and after, and the folds made."""

    table: str
    before: int = 0
    after: int = 0
    folds: int = 0
    runs_folded: int = 0


def choose_fold(
    parts: Sequence[SinkPartition],
    fanout: int = FANOUT,
    max_bytes: int | None = None,
    max_runs: int = MAX_FOLD_RUNS,
) -> list[SinkPartition]:
    """The partitions to fold next: the oldest `fanout` of the lowest tier that has `fanout`.

    A fold that would list more than `max_runs` run ids is never made. With `max_bytes`
    (upkeep inside a run), a fold whose sources hold more is skipped unless its tier holds
    2 x `fanout`. [] when nothing is left to fold (under those limits).
    """
    by_tier: dict[int, list[SinkPartition]] = {}
    for part in sorted(parts, key=lambda p: p.run_ids[0]):
        by_tier.setdefault(part.tier(fanout), []).append(part)
    for tier in sorted(by_tier):
        group = by_tier[tier]
        if len(group) < fanout:
            continue
        sources = group[:fanout]
        if sum(len(p.run_ids) for p in sources) > max_runs:
            continue
        small = max_bytes is None or sum(p.bytes for p in sources) <= max_bytes
        if small or len(group) >= 2 * fanout:
            return sources
    return []


def fold_sink(
    engine: Engine,
    table: str,
    max_steps: int | None = None,
    checkpoint: Callable[[str], None] = faults.crash_point,
    max_bytes: int | None = None,
) -> FoldReport:
    """Fold the target's partitions until every tier holds fewer than FANOUT (or `max_steps`;
    with `max_bytes`, bigger folds are left while their tier is not twice full: choose_fold).

    Each fold is its own transaction; call it under the drain's lease, so the drain's own
    commits do not wait behind it. A plain or missing target has nothing to fold.
    """
    report = FoldReport(table)
    with engine.connect() as conn:
        if sinks.relkind(conn, table) != "p":
            return report
        report.before = report.after = len(sink_folds.partitions(conn, table))
    while max_steps is None or report.folds < max_steps:
        with engine.begin() as conn:
            parts = sink_folds.partitions(conn, table)
            report.after = len(parts)
            sources = choose_fold(parts, max_bytes=max_bytes)
            if not sources:
                break
            folded = sink_folds.fold(conn, table, sources, LOCK_TIMEOUT_S, checkpoint)
        report.folds += 1
        report.runs_folded += len(folded.run_ids)
        report.after -= len(sources) - 1
        log.debug("sink %s: folded %d partitions into %s", table, len(sources), folded.name)
    if report.folds:
        log.info(
            "sink %s: %d folds, %d partitions -> %d",
            table,
            report.folds,
            report.before,
            report.after,
        )
    return report


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


def after_commit_upkeep(engine: Engine, drain: DrainConfig) -> None:
    """What every committed run does to keep the drain bounded (a failure is a warning)."""
    if drain.sink.type == "postgres":  # a lakehouse table has no partitions of ours
        fold_sink(
            engine,
            drain.sink.postgres_table,
            max_steps=AFTER_COMMIT_STEPS,
            max_bytes=UPKEEP_FOLD_BYTES,
        )
    prune_history(engine, drain, hourly=True)


@dataclass
class MaintainReport:
    """What `drainer maintain` did for one drain."""

    drain: str
    sink: FoldReport
    history: PruneReport


def maintain_drain(drain: DrainConfig, wait_s: float = 0.0) -> MaintainReport:
    """Everything upkeep does, to the end, under the drain's lease (DrainBusy while it runs)."""
    engine = get_engine()
    with drain_lease(engine, drain.row(), wait_s):
        folded = (
            fold_sink(engine, drain.sink.postgres_table)
            if drain.sink.type == "postgres"
            else FoldReport(drain.sink.table or "")
        )
        return MaintainReport(drain.name, folded, prune_history(engine, drain))
