"""A Postgres sink's upkeep: its target's run partitions folded so their count stays bounded.

Run after every commit (drainer.sinks.postgres `upkeep`; failures are warnings, the next run
retries) and to the end by `drainer maintain`.

**Sink partitions.** A commit attaches one range partition per run (cheap, inside the commit;
readers are not blocked). Folding then keeps the count low, size-tiered like an LSM tree: a
partition holding fewer than FANOUT runs is tier 0, fewer than FANOUT² tier 1, and so on;
whenever a tier has FANOUT partitions, its oldest FANOUT are folded into one of the next tier
(drainer.store.sink_folds: one transaction, readers wait only for the catalog swap). A range
bound holds any number of runs, so there is no top tier: a target keeps at most FANOUT - 1
partitions per tier, about 7 x log8(runs) in all (42 after a year of five-minute runs), and each
row is copied once per tier it climbs.

**Targets of earlier versions** (LIST partitions, drainer.store.sink_partitions) are first
folded as those versions did (choose_list_fold: LIST tiers, at most MAX_LIST_FOLD_RUNS run ids a
bound), which takes a target of thousands of run partitions down to a few dozen, eight at a
time. Then they get their `<table>_runs` and all their listed partitions are folded into it at
once, before any other fold. At once, because a partition attached to `<table>_runs` must be
proven outside every list that remains, which Postgres does by scanning it, comparing each row
with each listed run id, while readers wait (512,000 rows with 3,584 run ids still listed:
10.6 s, benchmarks/README.md, fold_tiers); with none left the swap is catalog work again. And
not before the LIST folds, because one transaction cannot lock thousands of partitions ("out of
shared memory" at 4,096).

**Big folds stay out of the runs.** A fold in upkeep adds to that run's time, under the lease:
a tier-3 fold copies 512 runs of rows (1.8 s at 1,000 rows a run, 42 s at 10,000:
benchmarks/README.md, fold_tiers). So upkeep makes only folds of at most UPKEEP_FOLD_BYTES; a
bigger one waits for `drainer maintain` (run it daily for such a drain). Without it the count
stays bounded all the same: upkeep makes a deferred fold anyway once its tier holds 2 x FANOUT
partitions, so a tier never holds more than 2 x FANOUT - 1.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from sqlalchemy import Connection, Engine, text

from drainer import faults
from drainer.sinks.base import UpkeepReport
from drainer.store import sink_folds, sink_partitions, sink_tables
from drainer.store.sink_partitions import SinkPartition

log = logging.getLogger(__name__)

FANOUT = 8  # partitions of one tier folded into one of the next
MAX_LIST_FOLD_RUNS = FANOUT**3  # run ids one LIST bound holds (pg_class rows are not TOASTed)
AFTER_COMMIT_STEPS = 16  # folds after one commit; a backlog of partitions shrinks over runs
# the biggest fold (its sources' bytes, indexes included) upkeep makes inside a run: a few
# seconds of copying (14-35 MB/s in benchmarks/README.md, fold_tiers), about 1% of a
# five-minute slot; bigger ones wait for `drainer maintain` until their tier is twice full
UPKEEP_FOLD_BYTES = 64 * 1024 * 1024
LOCK_TIMEOUT_S = 5.0  # longest wait for the target's readers before a fold gives up


def choose_fold(
    parts: Sequence[SinkPartition],
    fanout: int = FANOUT,
    max_bytes: int | None = None,
) -> list[SinkPartition]:
    """The partitions to fold next ([] when nothing is left to fold under these limits).

    Listed partitions first, all of them in one fold (the docstring above says why), and no
    other fold while any remain. Then the oldest `fanout` of the lowest tier that has `fanout`.
    Either way every partition whose range meets the fold's goes with it, so the new range
    overlaps none. With `max_bytes` (upkeep inside a run), a fold whose sources hold more is
    skipped unless its tier counts 2 x `fanout`; listed partitions holding more wait only until
    a tier fold is due (at most FANOUT - 1 runs), or while they are fewer than 2 x `fanout`.
    """
    ordered = sorted(parts, key=lambda p: p.first)
    listed = [p for p in ordered if p.listed]
    ranged = [p for p in ordered if not p.listed]
    by_tier: dict[int, list[SinkPartition]] = {}
    for part in ranged:
        by_tier.setdefault(part.tier(fanout), []).append(part)
    if listed:  # while any are listed, a tier fold would be scanned against their lists
        sources = _with_overlapping(listed, ordered)
        due = any(len(group) >= fanout for group in by_tier.values())
        big = len(listed) >= 2 * fanout
        return sources if _within(sources, max_bytes) or due or big else []
    for tier in sorted(by_tier):
        group = by_tier[tier]
        if len(group) < fanout:
            continue
        sources = _with_overlapping(group[:fanout], ranged)
        if _within(sources, max_bytes) or len(group) >= 2 * fanout:
            return sources
    return []


def _within(sources: Sequence[SinkPartition], max_bytes: int | None) -> bool:
    return max_bytes is None or sum(p.bytes for p in sources) <= max_bytes


def _with_overlapping(
    chosen: Sequence[SinkPartition], parts: Sequence[SinkPartition]
) -> list[SinkPartition]:
    """`chosen` and every range partition of `parts` whose range meets [first, last] of them,
    by first run id. Listed partitions not chosen stay: their runs are outside the new range's
    partition constraint (the DEFAULT's excludes them), whatever its bound says."""
    first, last = min(p.first for p in chosen), max(p.last for p in chosen)
    names = {p.name for p in chosen}
    return [
        p
        for p in parts
        if p.name in names or (not p.listed and p.first <= last and p.last >= first)
    ]


def choose_list_fold(
    parts: Sequence[SinkPartition],
    fanout: int = FANOUT,
    max_bytes: int | None = None,
    max_runs: int = MAX_LIST_FOLD_RUNS,
) -> list[SinkPartition]:
    """For a LIST target without its `<table>_runs`: the oldest `fanout` listed partitions of
    the lowest tier that has `fanout`, listing at most `max_runs` run ids together (with
    `max_bytes`, as choose_fold). [] when the LIST tiers are done."""
    by_tier: dict[int, list[SinkPartition]] = {}
    for part in sorted((p for p in parts if p.listed), key=lambda p: p.first):
        by_tier.setdefault(part.tier(fanout), []).append(part)
    for tier in sorted(by_tier):
        group = by_tier[tier]
        sources = group[:fanout]
        if len(group) < fanout or sum(p.runs for p in sources) > max_runs:
            continue
        if _within(sources, max_bytes) or len(group) >= 2 * fanout:
            return sources
    return []


def fold_sink(
    engine: Engine,
    table: str,
    max_steps: int | None = None,
    checkpoint: Callable[[str], None] = faults.crash_point,
    max_bytes: int | None = None,
) -> UpkeepReport:
    """Fold the target's partitions until every tier holds fewer than FANOUT (or `max_steps`;
    with `max_bytes`, bigger folds are left while their tier is not twice full: choose_fold).

    Each fold is its own transaction; call it under the drain's lease, so the drain's own
    commits do not wait behind it. A plain or missing target has nothing to fold.
    """
    report = UpkeepReport(table)
    with engine.connect() as conn:
        if sink_tables.relkind(conn, table) != "p":
            return report
        report.before = report.after = len(sink_partitions.partitions(conn, table))
    while max_steps is None or report.folds < max_steps:
        with engine.begin() as conn:
            parts = sink_partitions.partitions(conn, table)
            report.after = len(parts)
            sources, listed = _next_fold(conn, table, parts, max_bytes)
            if not sources:
                break
            folded = sink_folds.fold(conn, table, sources, LOCK_TIMEOUT_S, checkpoint, listed)
        report.folds += 1
        report.runs_folded += folded.runs
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


def _next_fold(
    conn: Connection, table: str, parts: Sequence[SinkPartition], max_bytes: int | None
) -> tuple[list[SinkPartition], bool]:
    """The next fold's sources and whether it is a LIST fold; a LIST target whose LIST folds
    are done gets its `<table>_runs` here, in the fold's transaction."""
    if sink_partitions.runs_parent(conn, table) is None:
        listed = choose_list_fold(parts, max_bytes=max_bytes)
        if listed:
            return listed, True
        conn.execute(text(f"SET LOCAL lock_timeout = '{int(LOCK_TIMEOUT_S * 1000)}ms'"))
        if sink_partitions.ensure_runs_parent(conn, table) is None:
            return [], False  # partitioned, but not by drainer's run column
    return choose_fold(parts, max_bytes=max_bytes), False
