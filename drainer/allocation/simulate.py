"""A policy simulator: replay an arrival trace through the real allocation code, on a simulated
clock with a simulated run time, and measure how long records wait (`drainer simulate`,
benchmarks/policy_simulator.py).

Pure: no Kafka, no database, no files (the caller reads a CSV trace and passes its text). Every
level is one partition whose records arrive in batches of a minute (the batch's minute is their
timestamp). Runs are due every `interval_min` minutes; each drains what its policy plans, oldest
records first, as the real drain does, and takes `Throughput.seconds` of simulated time; a run
still going at a due time delays the next one to the first due time after it ends (the drain
runs one run at a time). A record's wait is from its minute to the end of the run that drains it
(its commit). With `run_seconds` the run's budget comes from `drainer.allocation.timebox`, fed
with the simulated runs' records, bytes and seconds as `drainer.lifecycle.budgets` feeds it from
Postgres; with `budget_bytes` the policy gets the byte budget and each level's record size, as
`drainer.lifecycle.planning.allocation_policy` passes them. Policies compared: strict priority,
the seed paper's (reserved shares + burst from history, no backlog awareness), plain
proportional shares, and drainer's (with the drain's `backlog_aware`) with and without
`max_wait`.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from drainer.allocation.policy import AllocationPolicy
from drainer.allocation.shares import Distributor, minimum_budget, reserved_shares
from drainer.allocation.timebox import THROUGHPUT_HISTORY as HISTORY
from drainer.allocation.timebox import RunThroughput, timeboxed_budget
from drainer.allocation.traces import Trace
from drainer.allocation.types import OffsetForTime, PartitionBacklog

MINUTE_MS = 60_000


@dataclass(frozen=True)
class Drain:
    """What the simulator needs of a drain: its levels, budgets and allocation settings."""

    levels: int
    budget: int
    distributor: Distributor = "exponential"
    window: int = 6
    maxout_threshold: int = 4
    max_wait_ms: Mapping[int, int] | None = None
    backlog_aware: bool = True  # of the drainer policies; the seed and proportional ones: false
    run_seconds: float | None = None  # time-boxed budgets from the simulated throughput
    budget_bytes: int | None = None  # a per-run byte budget at `Throughput.record_bytes`


@dataclass(frozen=True)
class Throughput:
    """How long a simulated run takes: `fixed_s + records / records_per_s + bytes /
    bytes_per_s`, where a record of level L has `record_bytes[L]` key+value bytes (the last
    size stands for the levels above it). The defaults make a full run of 7,000 records of 1 KB
    take 230 s, inside the 5-minute interval of benchmarks/policy_simulator.py."""

    fixed_s: float = 20.0  # session, planning, commit: what a run costs whatever it reads
    records_per_s: float = 50.0
    bytes_per_s: float = 100_000.0
    record_bytes: tuple[float, ...] = (1000.0,)

    def __post_init__(self) -> None:
        if not self.fixed_s >= 0 or not self.records_per_s > 0 or not self.bytes_per_s > 0:
            raise ValueError(
                f"throughput fixed {self.fixed_s} s, {self.records_per_s} records/s, "
                f"{self.bytes_per_s} bytes/s: use a fixed cost >= 0 and rates > 0"
            )
        if not self.record_bytes or not all(size > 0 for size in self.record_bytes):
            raise ValueError(f"record sizes {self.record_bytes}: give one size > 0 per level")

    @staticmethod
    def sizes(text: str, levels: int) -> tuple[float, ...]:
        """Record sizes from `--record-bytes`: `2000,1000,500` (lowest level first, the last size
        standing for the levels above it) or `2:100,0:10000` (level:bytes; a level not named
        has the size of the nearest named level below it, or of the lowest named one)."""
        parts = [part.strip() for part in text.split(",") if part.strip()]
        try:
            if not any(":" in part for part in parts):
                return tuple(float(part) for part in parts)
            named: dict[int, float] = {}
            for part in parts:
                name, _, size = part.partition(":")
                named[int(name)] = float(size)
        except ValueError:
            raise ValueError(
                f"record sizes {text!r}: use bytes per level, lowest first (2000,1000,500) or "
                "level:bytes pairs (2:100,0:10000)"
            ) from None
        if not all(0 <= level < levels for level in named):
            raise ValueError(f"record sizes {text!r}: name levels 0..{levels - 1}")
        lowest = named[min(named)]
        sizes: list[float] = []
        for level in range(levels):
            sizes.append(named.get(level, sizes[-1] if sizes else lowest))
        return tuple(sizes)

    def size(self, level: int) -> float:
        return self.record_bytes[min(level, len(self.record_bytes) - 1)]

    def seconds(self, records: int, nbytes: float) -> float:
        """A run's wall time; a run that drains nothing costs nothing (it commits nothing)."""
        if records == 0:
            return 0.0
        return self.fixed_s + records / self.records_per_s + nbytes / self.bytes_per_s


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

    def drain(self, count: int, commit_ms: int, waits: dict[int, int]) -> None:
        """Read `count` records from the committed offset, adding their waits (seconds from
        their minute to `commit_ms`)."""
        stop = self.committed + count
        i = bisect_right(self.ends, self.committed)
        while self.committed < stop:
            take = min(self.ends[i], stop) - self.committed
            wait = (commit_ms - self.minutes[i] * MINUTE_MS) // 1000
            waits[wait] = waits.get(wait, 0) + take
            self.committed += take
            i += 1


@dataclass(frozen=True)
class RunInputs:
    """What a planner sees for one run, as the real drain's planning builds it."""

    backlogs: list[PartitionBacklog]
    history: dict[int, list[int]]
    now_ms: int
    offset_for_time: OffsetForTime
    budget: int  # the configured budget, or the time-boxed one
    budget_bytes: int | None  # with `budget_bytes` (lowered to what the slot holds in bytes)
    record_bytes: dict[tuple[int, int], float]  # per (level, partition), with budget_bytes


Planner = Callable[[Drain, RunInputs], dict[int, int]]
"""`(drain, run) -> records per level` for one run."""


def strict_priority(drain: Drain, run: RunInputs) -> dict[int, int]:
    """The highest level with records takes all it can, then the next: the latency baseline.

    With a byte budget the same order, until the records or the bytes run out."""
    left, planned = run.budget, {}
    bytes_left = None if run.budget_bytes is None else float(run.budget_bytes)
    for b in sorted(run.backlogs, key=lambda b: -b.level):
        count = min(left, b.backlog)
        size = run.record_bytes.get((b.level, b.partition), 0.0)
        if bytes_left is not None and size > 0:
            count = min(count, int(bytes_left // size))
            bytes_left -= count * size
        planned[b.level] = count
        left -= count
    return planned


def _policy(
    backlog_aware: bool | None = None, burst: bool = True, max_wait: bool = False
) -> Planner:
    """drainer's `AllocationPolicy` with these switches, over the simulated drain; a
    `backlog_aware` of None is the drain's own setting."""

    def plan(drain: Drain, run: RunInputs) -> dict[int, int]:
        limits = drain.max_wait_ms if max_wait else None
        policy = AllocationPolicy(
            run.budget,
            levels=range(drain.levels),
            distributor=drain.distributor,
            history=run.history if burst else {},
            window=drain.window,
            maxout_threshold=drain.maxout_threshold,
            backlog_aware=drain.backlog_aware if backlog_aware is None else backlog_aware,
            max_wait_ms=limits or None,
            now_ms=run.now_ms,
            offset_for_time=run.offset_for_time if limits else None,
            budget_bytes=run.budget_bytes,
            record_bytes=run.record_bytes if run.budget_bytes is not None else None,
        )
        return {level: lp.planned for level, lp in policy.plan(run.backlogs).levels.items()}

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
shares (reserved shares only); drainer's policy (with the drain's `backlog_aware`, true unless
it says otherwise); drainer's policy with the drain's max_wait."""


@dataclass(frozen=True)
class LevelResult:
    level: int
    records: int
    p50_wait_min: float  # from the record's minute to the end (commit) of the run draining it
    p99_wait_min: float
    max_wait_min: float
    over_max_wait: int  # records that waited longer than the level's max_wait (0 without one)


@dataclass(frozen=True)
class Result:
    policy: str
    levels: list[LevelResult]  # highest level first
    runs: int
    runs_to_empty: int | None  # runs until every level is empty after the last arrival
    utilization: float  # drained / min(budget, backlog), over all runs; a run whose bytes are
    # used up (with `budget_bytes`: no waiting record fits in the bytes left) counts as full
    inversions: int  # runs where a lower level got more than its share while a higher one waited
    run_p50_s: float = 0.0  # simulated wall time of the runs that drained something
    run_max_s: float = 0.0
    over_run_seconds: int = 0  # runs longer than `run_seconds` (the interval when not set)
    budget_p50: int = 0  # the records budget the runs had (time-boxed: what throughput allowed)


def simulate(
    drain: Drain,
    trace: Trace,
    policy: str,
    interval_min: int = 5,
    max_runs: int = 10_000,
    throughput: Throughput | None = None,
) -> Result:
    """Replay `trace` through `policy`, a run due every `interval_min` minutes, until all is
    drained; runs take `throughput`'s time (default `Throughput()`)."""
    plan = POLICIES[policy]
    speed = throughput or Throughput()
    logs = [_Level() for _ in range(drain.levels)]
    waits: list[dict[int, int]] = [{} for _ in range(drain.levels)]
    history: dict[int, list[int]] = {level: [] for level in range(drain.levels)}
    sizes = {(level, 0): speed.size(level) for level in range(drain.levels)}
    floor = max(1, minimum_budget(drain.levels, drain.distributor))
    slot_s = drain.run_seconds if drain.run_seconds is not None else interval_min * 60.0
    tick_ms = interval_min * MINUTE_MS
    recent: list[RunThroughput] = []
    run_times: list[float] = []
    budgets: list[int] = []
    now_ms = arrived = runs = 0
    runs_to_empty = None
    used = possible = 0.0
    inversions = 0

    def offset_for_time(level: int, _partition: int, timestamp_ms: int) -> int:
        return logs[level].offset_for_time(timestamp_ms)

    while runs < max_runs:
        minute = now_ms // MINUTE_MS
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
        budget, budget_bytes = drain.budget, drain.budget_bytes
        if drain.run_seconds is not None:  # as drainer.lifecycle.budgets.run_budget does
            box = timeboxed_budget(drain.run_seconds, drain.budget, recent, floor)
            budget = box.budget
            if budget_bytes is not None and box.byte_budget is not None:
                budget_bytes = max(1, min(budget_bytes, box.byte_budget))
        run = RunInputs(
            backlogs,
            history,
            now_ms,
            offset_for_time,
            budget,
            budget_bytes,
            sizes if budget_bytes is not None else {},
        )
        planned = plan(drain, run)
        records = sum(planned.values())
        nbytes = sum(count * speed.size(level) for level, count in planned.items())
        seconds = speed.seconds(records, nbytes)
        end_ms = now_ms + round(seconds * 1000)
        for level, log in enumerate(logs):
            count = planned.get(level, 0)
            log.drain(count, end_ms, waits[level])
            history[level] = [*history[level], count][-drain.window :]
        if records:
            recent = [*recent, RunThroughput(records, seconds, round(nbytes), budget)][-HISTORY:]
            run_times.append(seconds)
        budgets.append(budget)
        could = min(budget, sum(waiting.values()))
        left = [speed.size(lvl) for lvl, n in waiting.items() if n > planned.get(lvl, 0)]
        if budget_bytes is not None and left and nbytes + min(left) > budget_bytes:
            used += could  # its bytes are used up: no waiting record fits in what is left
        else:
            used += records
        possible += could
        reserved = reserved_shares(drain.levels, budget, drain.distributor)
        inversions += any(
            planned.get(low, 0) > reserved[low]
            and any(planned.get(high, 0) < waiting[high] for high in range(low + 1, drain.levels))
            for low in range(drain.levels)
        )
        runs += 1
        now_ms = max(now_ms + tick_ms, -(-end_ms // tick_ms) * tick_ms)
    limits = drain.max_wait_ms or {}
    return Result(
        policy=policy,
        levels=[
            LevelResult(
                level,
                sum(waits[level].values()),
                _minutes(_percentile(waits[level], 0.50)),
                _minutes(_percentile(waits[level], 0.99)),
                _minutes(max(waits[level], default=0)),
                sum(
                    n
                    for wait, n in waits[level].items()
                    if level in limits and wait * 1000 > limits[level]
                ),
            )
            for level in reversed(range(drain.levels))
        ],
        runs=runs,
        runs_to_empty=runs_to_empty,
        utilization=used / possible if possible else 1.0,
        inversions=inversions,
        run_p50_s=round(_percentile(_histogram(run_times), 0.50), 1),
        run_max_s=round(max(run_times, default=0.0), 1),
        over_run_seconds=sum(seconds > slot_s for seconds in run_times),
        budget_p50=int(_percentile(_histogram(budgets), 0.50)),
    )


def compare(
    drain: Drain,
    trace: Trace,
    interval_min: int = 5,
    policies: Iterable[str] | None = None,
    throughput: Throughput | None = None,
) -> list[Result]:
    return [
        simulate(drain, trace, name, interval_min, throughput=throughput)
        for name in policies or POLICIES
    ]


def _histogram(values: Iterable[float]) -> dict[float, int]:
    counts: dict[float, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def _minutes(seconds: float) -> float:
    return round(seconds / 60, 1)


def _percentile(histogram: Mapping[int, int] | Mapping[float, int], q: float) -> float:
    """The `q` quantile of a histogram {value: count} (nearest rank); 0 when empty."""
    total = sum(histogram.values())
    if not total:
        return 0.0
    rank, seen = math.ceil(q * total), 0
    for value, count in sorted(histogram.items()):
        seen += count
        if seen >= rank:
            return float(value)
    return float(max(histogram))


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
                    f"{r.budget_p50:,}",
                    f"{r.run_p50_s:g}",
                    f"{r.run_max_s:g}",
                    str(r.over_run_seconds),
                ]
            )
    return rows


COLUMNS = [
    "policy",
    "level",
    "p50",
    "p99",
    "max",
    "> max_wait",
    "runs",
    "util",
    "inversions",
    "budget p50",
    "run p50 s",
    "run max s",
    "> slot",
]
"""Waits in minutes, from arrival to the commit of the run that drains the record;
`> max_wait`: records that waited longer; `runs`: runs until all levels are empty; `util`:
drained / min(budget, backlog) (with `budget_bytes`, a run that used its byte budget is full);
`inversions`: runs that gave a lower level more than its reserved share while a higher level
kept records waiting; `budget p50`: the runs' record budget (time-boxed with `run_seconds`);
`run p50 s`, `run max s`: simulated run times; `> slot`: runs longer than `run_seconds` (than
the interval without it)."""
