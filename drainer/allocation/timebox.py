"""Time-boxed runs: the record budget that lets a run finish inside its slot (`run_seconds`).

People schedule drains in time ("a run must finish inside its five-minute slot"), the planner
counts records. The bridge is the drain's measured throughput: the median of the records (and
bytes) per second of its recent runs, each over its whole slot (`runs.slot_s`: from just after the lease through plan,
Spark, commit, mirror, dead letters, upkeep and the backlog report; stored by a small update
after those steps, so the commit's transaction is unchanged). Outside it: process start
(interpreter, imports, configuration), waiting for the lease and opening the Kafka session, and
an earlier open plan the run finishes first; a scheduler's slot must leave room for those.
`budget` stays the cap, and a drain without history uses it.

Why one rate over the whole slot rather than a fixed per-run cost plus a per-record rate: time-
boxed runs converge to one size, so the two terms cannot be told apart from their history (a fit
of `seconds = a + b * records` over near-equal runs is ill-conditioned), and a run's fixed part
is not a phase one can time apart (the commit copies rows, upkeep folds depend on the run
count). The plain rate is enough: with a run taking `o + B / r` seconds for `B` records, the
next budget `T * B / (o + B / r)` moves toward the budget that fills the slot exactly,
`r * (T - o)`, shrinking the distance by a factor of at least `o / T` each run.

A run that overshot its slot lowers the next estimate by the factor it overshot, on top of its
own lower rate entering the average: slow runs are corrected at once, not over a window.

Only runs that drained their whole budget measure throughput. A run that drained less was
limited by the backlog or by records held back behind failing ones, not by time: its fixed cost
spread over a few records shows a rate far below the real one (4 records in 0.9 s), and the
budgets it produced collapsed the next runs to a fraction of the slot (87 of 1,500 with 3,000
records waiting), recovering only over several runs. Such a run's rate is a lower bound, not a
measurement: it is used only while no run in the history drained its whole budget (the safe
side for a drain's first runs), and it still lowers the estimate when it overshot its slot.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

THROUGHPUT_WINDOW = 5
"""Recent runs whose throughput the estimate averages."""

THROUGHPUT_HISTORY = 4 * THROUGHPUT_WINDOW
"""Recent runs searched for those `THROUGHPUT_WINDOW` that drained their whole budget."""


@dataclass(frozen=True)
class RunThroughput:
    """What one committed run drained and how long it took (oldest first in a sequence)."""

    records: int
    seconds: float
    bytes: int | None = None
    budget: int | None = None  # the record budget it was planned with (None: unknown)

    @property
    def limited(self) -> bool:
        """True when it drained less than its budget: backlog or held-back records, not time,
        decided its size, so its rate says little about throughput."""
        return self.budget is not None and self.records < self.budget


@dataclass(frozen=True)
class TimeBox:
    """The budget a run gets for its slot, and the throughput it was derived from."""

    budget: int
    records_per_s: float | None  # None: no history, the configured budget applies
    bytes_per_s: float | None
    byte_budget: int | None  # bytes the slot holds at the measured byte rate
    reason: str


def timeboxed_budget(
    run_seconds: float,
    cap: int,
    recent: Sequence[RunThroughput],
    minimum: int = 1,
    window: int = THROUGHPUT_WINDOW,
) -> TimeBox:
    """Records a run can drain in `run_seconds`, at most `cap` and at least `minimum`.

    `minimum` is the smallest budget the drain's distributor can split (one record per level);
    a slot too short for it still gets it rather than a configuration error at run time.
    """
    runs = [r for r in recent if r.records > 0 and r.seconds > 0]
    if not runs:
        return TimeBox(cap, None, None, None, "no measured run yet: the configured budget")
    measured = [r for r in runs if not r.limited][-window:]
    which = "full runs"
    if not measured:  # only runs cut short: their rates are lower bounds, the safe side
        measured, which = runs[-window:], "runs, none of them full"
    # the median run's rate, not the pooled one: a run much larger than the slot's (the first,
    # capped run) shows a rate its fixed cost is spread thin over, and would dominate a pool
    rate = statistics.median(r.records / r.seconds for r in measured)
    with_bytes = [r for r in measured if r.bytes]
    byte_rate = (
        statistics.median((r.bytes or 0) / r.seconds for r in with_bytes) if with_bytes else None
    )
    last = runs[-1]  # the latest run, limited or not: did it fit its slot?
    reason = f"{rate:,.0f} records/s (median of the last {len(measured)} {which})"
    if last.seconds > run_seconds:
        factor = run_seconds / last.seconds
        rate = min(rate, last.records / last.seconds * factor)
        byte_rate = None if byte_rate is None else byte_rate * factor
        reason += f"; lowered: the last run took {last.seconds:.1f} s of a {run_seconds:g} s slot"
    slot = rate * run_seconds
    budget = max(minimum, cap if slot >= cap else int(slot))
    byte_slot = None if byte_rate is None else byte_rate * run_seconds
    byte_budget = None if byte_slot is None or not math.isfinite(byte_slot) else int(byte_slot)
    if budget == cap:
        reason += f"; capped by budget {cap:,}"
    return TimeBox(budget, rate, byte_rate, byte_budget, reason)
