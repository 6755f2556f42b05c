"""A policy simulator: replay an arrival trace through the real allocation code, on a simulated
clock, and measure how long records wait (`drainer simulate`, benchmarks/policy_simulator.py).

Pure: no Kafka, no database, no files (the caller reads a CSV trace and passes its text). Every level is one partition whose records arrive in batches of a
minute (the batch's minute is their timestamp); a run every `interval_min` minutes drains what
its policy plans, oldest records first, as the real drain does. Policies compared: strict
priority, the seed paper's (reserved shares + burst from history, no backlog awareness), plain
proportional shares, and drainer's (backlog aware) with and without `max_wait`.
"""

from __future__ import annotations

import csv
import io
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drainer.allocation.policy import AllocationPolicy
from drainer.allocation.shares import Distributor, reserved_shares
from drainer.allocation.types import PartitionBacklog

MINUTE_MS = 60_000

Trace = list[list[int]]
"""Arrivals: `trace[minute][level]` records arrive in that minute."""


@dataclass(frozen=True)
class Drain:
    """What the simulator needs of a drain: its levels, budget and allocation settings."""

    levels: int
    budget: int
    distributor: Distributor = "exponential"
    window: int = 6
    maxout_threshold: int = 4
    max_wait_ms: Mapping[int, int] | None = None


@dataclass
class _Level:
    """One level's log: batches of records (their minute, the offset past them), and progress."""

    minutes: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    committed: int = 0

    @property
    def end(self) -> int:
        return self.ends[-1] if self.ends else 0

    def arrive(self, minute: int, count: int) -> None:
        if count > 0:
            self.minutes.append(minute)
            self.ends.append(self.end + count)

    def offset_for_time(self, timestamp_ms: int) -> int:
        """The first offset whose minute is at or after `timestamp_ms`."""
        i = bisect_left(self.minutes, math.ceil(timestamp_ms / MINUTE_MS))
        return self.ends[i - 1] if i > 0 else 0

    def timestamp_at(self, offset: int) -> int | None:
        i = bisect_right(self.ends, offset)
        return self.minutes[i] * MINUTE_MS if i < len(self.minutes) else None

    def drain(self, count: int, now_min: int, waits: dict[int, int]) -> None:
        """Read `count` records from the committed offset, adding their waits (minutes)."""
        stop = self.committed + count
        i = bisect_right(self.ends, self.committed)
        while self.committed < stop:
            take = min(self.ends[i], stop) - self.committed
            wait = now_min - self.minutes[i]
            waits[wait] = waits.get(wait, 0) + take
            self.committed += take
            i += 1


Lookups = dict[str, Callable[..., Any]]
Planner = Callable[
    [Drain, list[PartitionBacklog], dict[int, list[int]], int, Lookups], dict[int, int]
]
"""`(drain, backlogs, history, now_ms, lookups) -> records per level` for one run."""


def strict_priority(
    drain: Drain,
    backlogs: list[PartitionBacklog],
    history: dict[int, list[int]],
    now_ms: int,
    lookups: Lookups,
) -> dict[int, int]:
    """The highest level with records takes all it can, then the next: the latency baseline."""
    left, planned = drain.budget, {}
    for b in sorted(backlogs, key=lambda b: -b.level):
        planned[b.level] = min(left, b.backlog)
        left -= planned[b.level]
    return planned


def _policy(backlog_aware: bool = True, burst: bool = True, max_wait: bool = False) -> Planner:
    """drainer's `AllocationPolicy` with these switches, over the simulated drain."""

    def plan(
        drain: Drain,
        backlogs: list[PartitionBacklog],
        history: dict[int, list[int]],
        now_ms: int,
        lookups: Lookups,
    ) -> dict[int, int]:
        limits = drain.max_wait_ms if max_wait else None
        policy = AllocationPolicy(
            drain.budget,
            levels=range(drain.levels),
            distributor=drain.distributor,
            history=history if burst else {},
            window=drain.window,
            maxout_threshold=drain.maxout_threshold,
            backlog_aware=backlog_aware,
            max_wait_ms=limits or None,
            now_ms=now_ms,
            offset_for_time=lookups["offset_for_time"] if limits else None,
        )
        return {lvl: lp.planned for lvl, lp in policy.plan(backlogs).levels.items()}

    return plan


POLICIES: dict[str, Planner] = {
    "strict": strict_priority,
    "seed": _policy(backlog_aware=False),
    "proportional": _policy(backlog_aware=False, burst=False),
    "drainer": _policy(),
    "drainer+max_wait": _policy(max_wait=True),
}
"""The policies `simulate` compares, by the name its report uses: strict priority; the seed
paper's reserved shares + burst from history (`backlog_aware: false`); plain proportional
shares (reserved shares only); drainer's policy; drainer's policy with the drain's max_wait."""


@dataclass(frozen=True)
class LevelResult:
    level: int
    records: int
    p50_wait_min: float
    p99_wait_min: float
    max_wait_min: float
    over_max_wait: int  # records that waited longer than the level's max_wait (0 without one)


@dataclass(frozen=True)
class Result:
    policy: str
    levels: list[LevelResult]  # highest level first
    runs: int
    runs_to_empty: int | None  # runs until every level is empty after the last arrival
    utilization: float  # drained / min(budget, backlog), over all runs
    inversions: int  # runs where a lower level got more than its share while a higher one waited


def simulate(
    drain: Drain, trace: Trace, policy: str, interval_min: int = 5, max_runs: int = 10_000
) -> Result:
    """Replay `trace` through `policy`, a run every `interval_min` minutes until all is drained."""
    plan = POLICIES[policy]
    logs = [_Level() for _ in range(drain.levels)]
    waits: list[dict[int, int]] = [{} for _ in range(drain.levels)]
    history: dict[int, list[int]] = {level: [] for level in range(drain.levels)}
    reserved = reserved_shares(drain.levels, drain.budget, drain.distributor)
    lookups = {
        "offset_for_time": lambda level, _p, ts: logs[level].offset_for_time(ts),
        "timestamp_at": lambda level, _p, offset: logs[level].timestamp_at(offset),
    }
    minute = arrived = runs = 0
    runs_to_empty = None
    drained_total = possible_total = inversions = 0
    while runs < max_runs:
        while arrived <= minute and arrived < len(trace):  # what arrived by this run's minute
            for level, count in enumerate(trace[arrived][: drain.levels]):
                logs[level].arrive(arrived, count)
            arrived += 1
        backlogs = [
            PartitionBacklog(
                level, 0, log.committed, log.end, next_timestamp=log.timestamp_at(log.committed)
            )
            for level, log in enumerate(logs)
        ]
        waiting = {b.level: b.backlog for b in backlogs}
        if minute >= len(trace) and not any(waiting.values()):
            runs_to_empty = runs
            break
        planned = plan(drain, backlogs, history, minute * MINUTE_MS, lookups)
        for level, log in enumerate(logs):
            count = planned.get(level, 0)
            log.drain(count, minute, waits[level])
            history[level] = [*history[level], count][-drain.window :]
        drained_total += sum(planned.values())
        possible_total += min(drain.budget, sum(waiting.values()))
        inversions += any(
            planned.get(low, 0) > reserved[low]
            and any(planned.get(high, 0) < waiting[high] for high in range(low + 1, drain.levels))
            for low in range(drain.levels)
        )
        runs += 1
        minute += interval_min
    limits = drain.max_wait_ms or {}
    return Result(
        policy=policy,
        levels=[
            LevelResult(
                level,
                sum(waits[level].values()),
                _percentile(waits[level], 0.50),
                _percentile(waits[level], 0.99),
                float(max(waits[level], default=0)),
                sum(
                    n
                    for wait, n in waits[level].items()
                    if level in limits and wait * MINUTE_MS > limits[level]
                ),
            )
            for level in reversed(range(drain.levels))
        ],
        runs=runs,
        runs_to_empty=runs_to_empty,
        utilization=drained_total / possible_total if possible_total else 1.0,
        inversions=inversions,
    )


def compare(
    drain: Drain, trace: Trace, interval_min: int = 5, policies: Iterable[str] | None = None
) -> list[Result]:
    return [simulate(drain, trace, name, interval_min) for name in policies or POLICIES]


def _percentile(histogram: Mapping[int, int], q: float) -> float:
    """The `q` quantile of a histogram {value: count} (nearest rank); 0 when empty."""
    total = sum(histogram.values())
    if not total:
        return 0.0
    rank, seen = math.ceil(q * total), 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return float(value)
    return float(max(histogram))


# --- traces ------------------------------------------------------------------------------------


def builtin_trace(name: str, drain: Drain, interval_min: int = 5) -> Trace:
    """`steady`, `top-burst`, `bottom-flood` or `diurnal`, scaled to the drain's capacity
    (one budget per interval): steady is 80% of it, spread evenly over the levels."""
    capacity = drain.budget / interval_min  # records a minute
    n = drain.levels

    def even(load: float) -> list[int]:
        return [round(load * capacity / n)] * n

    if name == "steady":
        return [even(0.8) for _ in range(240)]
    if name == "top-burst":  # 30 minutes of 2x capacity on the top level, over a 50% base
        return [
            [*even(0.5)[:-1], even(0.5)[-1] + (round(2 * capacity) if 60 <= m < 90 else 0)]
            for m in range(240)
        ]
    if name == "bottom-flood":  # 30 minutes of 4x capacity on level 0, over a 50% base
        return [
            [even(0.5)[0] + (round(4 * capacity) if 30 <= m < 60 else 0), *even(0.5)[1:]]
            for m in range(240)
        ]
    if name == "diurnal":  # a day between 20% and 110% of capacity
        return [even(0.65 + 0.45 * math.sin(2 * math.pi * m / 1440)) for m in range(1440)]
    raise ValueError(
        f"trace {name!r} is unknown: use one of {', '.join(TRACES)} or a CSV file path"
    )


TRACES = ("steady", "top-burst", "bottom-flood", "diurnal")


def parse_trace(text: str, levels: int, source: str = "trace") -> Trace:
    """A CSV with a header `minute,0,1,...` (one column per level) and arrival counts per row;
    minutes missing from the file have no arrivals. `source` names the file in errors."""
    rows = list(csv.DictReader(io.StringIO(text)))
    path = source
    if not rows or "minute" not in rows[0]:
        raise ValueError(
            f"{path}: expected a CSV header `minute,0,1,...` with one column per level"
        )
    trace: Trace = []
    for n, row in enumerate(rows, start=2):
        try:
            minute = int(row["minute"])
            counts = [int(row.get(str(level)) or 0) for level in range(levels)]
        except ValueError:
            raise ValueError(f"{path}:{n}: minute and counts must be whole numbers") from None
        if minute < 0 or min(counts) < 0:
            raise ValueError(f"{path}:{n}: minute and counts must be >= 0")
        while len(trace) <= minute:
            trace.append([0] * levels)
        trace[minute] = [a + b for a, b in zip(trace[minute], counts, strict=True)]
    return trace


def table(results: Sequence[Result]) -> list[list[str]]:
    """Rows for a report: per policy and level, the waits; per policy, the run numbers."""
    rows = []
    for r in results:
        for lv in r.levels:
            rows.append(
                [
                    r.policy,
                    str(lv.level),
                    f"{lv.p50_wait_min:g}",
                    f"{lv.p99_wait_min:g}",
                    f"{lv.max_wait_min:g}",
                    f"{lv.over_max_wait:,}",
                    "" if r.runs_to_empty is None else str(r.runs_to_empty),
                    f"{r.utilization:.0%}",
                    str(r.inversions),
                ]
            )
    return rows


COLUMNS = ["policy", "level", "p50", "p99", "max", "> max_wait", "runs", "util", "inversions"]
"""Waits in minutes; `> max_wait`: records that waited longer; `runs`: runs until all levels
are empty; `util`: drained / min(budget, backlog); `inversions`: runs that gave a lower level
more than its reserved share while a higher level kept records waiting."""
