"""Allocation of one run's record budget across levels and partitions (docs/allocation.md).

Pure arithmetic, no I/O: the caller looks up history (Postgres), backlogs and offsets-for-times
(Kafka) and passes the results in, so the CLI dry run, the Dagster asset and the tests all get the
same plan from the same inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from drainer.processing.callables import load_callable

WeightFunction = Callable[[list[int]], Sequence[float]]
"""A pluggable distributor: the covered levels (ascending) in, one positive weight per level out."""

Distributor = str | Sequence[float] | Mapping[int, float] | WeightFunction
"""A registry name, an import path `package.module:function`, explicit weights, or a callable."""

OffsetForTime = Callable[[int, int, int], int]
"""`(level, partition, timestamp_ms) -> first offset with timestamp >= timestamp_ms` (else end)."""


# --- distributors ---------------------------------------------------------------------------------


def exponential_weights(levels: list[int]) -> list[int]:
    """Weight 2**i: each level gets about twice the level below it (the default)."""
    return [2**level for level in levels]


def linear_weights(levels: list[int]) -> list[int]:
    """Weight i+1: a gentler slope for drains with many levels, where 2**i would starve level 0."""
    return [level + 1 for level in levels]


def equal_weights(levels: list[int]) -> list[int]:
    """Weight 1: a flat split, for drains whose levels are partitions of work, not priorities."""
    return [1 for _ in levels]


DISTRIBUTORS: dict[str, WeightFunction] = {
    "exponential": exponential_weights,
    "linear": linear_weights,
    "equal": equal_weights,
}
"""Distributors known by name; anything else is given as an import path or as weights."""


# --- reserved shares ---------------------------------------------------------------------


def reserved_shares(
    levels: int | Iterable[int],
    budget: int,
    distributor: Distributor = "exponential",
) -> dict[int, int]:
    """Each covered level's reserved part of `budget`, summing exactly to `budget`.

    share_i = floor(budget * w_i / sum(w)) in exact rational arithmetic (so float weights cannot
    lose or invent a record); what rounding leaves over goes to the highest covered level.
    """
    covered = _covered_levels(levels)
    _check_budget(budget)
    weights = _weights(covered, distributor)
    minimum = _minimum_budget(weights)
    if budget < minimum:
        raise ValueError(
            f"budget {budget} is too small for levels {covered} with "
            f"{_describe(distributor)}: every level needs at least 1 record, "
            f"so set budget >= {minimum}"
        )
    total = sum(weights)
    shares = [math.floor(budget * weight / total) for weight in weights]
    shares[-1] += budget - sum(shares)
    return dict(zip(covered, shares, strict=True))


def minimum_budget(levels: int | Iterable[int], distributor: Distributor = "exponential") -> int:
    """The smallest budget giving every covered level at least 1 record (for config validation)."""
    return _minimum_budget(_weights(_covered_levels(levels), distributor))


def _minimum_budget(weights: list[Fraction]) -> int:
    # floor(B*w_i/W) >= 1 iff B >= ceil(W/w_i). The highest level needs no term: its share is
    # B - sum of the others' floors >= B*w_top/W > 0, hence >= 1, for any B >= 1.
    total = sum(weights)
    return max((math.ceil(total / weight) for weight in weights[:-1]), default=1)


def _covered_levels(levels: int | Iterable[int]) -> list[int]:
    if isinstance(levels, int) and not isinstance(levels, bool):
        if levels < 1:
            raise ValueError(
                f"levels {levels}: a drain needs at least 1 priority level, so set levels >= 1"
            )
        return list(range(levels))
    covered = sorted(set(levels))
    if not covered:
        raise ValueError("levels is empty: cover at least one priority level (0..N-1)")
    for level in covered:
        if isinstance(level, bool) or not isinstance(level, int):
            raise ValueError(f"level {level!r} is not an integer: levels are 0..N-1")
        if level < 0:
            raise ValueError(f"level {level} is negative: priority levels are numbered 0..N-1")
    return covered


def _check_budget(budget: int) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(
            f"budget {budget!r} is not a positive whole number of records: set budget >= 1"
        )


def _describe(distributor: Distributor) -> str:
    if isinstance(distributor, str):
        if distributor in DISTRIBUTORS:
            return f"the {distributor} distributor"
        return f"the distributor {distributor!r}"
    if isinstance(distributor, Mapping | Sequence):
        return "explicit distributor weights"
    name = getattr(distributor, "__qualname__", None) or repr(distributor)
    return f"the distributor {name}"


def _weights(levels: list[int], distributor: Distributor) -> list[Fraction]:
    """Resolve the distributor to exact positive weights, one per covered level (ascending)."""
    if isinstance(distributor, str):
        if distributor in DISTRIBUTORS:
            raw = DISTRIBUTORS[distributor](list(levels))
        elif ":" in distributor:
            raw = load_callable(distributor, "distributor")(list(levels))
        else:
            raise ValueError(
                f"distributor {distributor!r} is unknown: use one of "
                f"{', '.join(sorted(DISTRIBUTORS))}, explicit weights, "
                "or an import path 'package.module:function'"
            )
    elif isinstance(distributor, Mapping):
        missing = [level for level in levels if level not in distributor]
        if missing:
            raise ValueError(
                f"distributor weights have no weight for levels {missing}: "
                "give a weight for every covered level"
            )
        raw = [distributor[level] for level in levels]
    elif callable(distributor):
        raw = distributor(list(levels))
    elif isinstance(distributor, Sequence):
        if levels[-1] >= len(distributor):
            raise ValueError(
                f"the distributor weights list has {len(distributor)} weights (levels 0.."
                f"{len(distributor) - 1}) but level {levels[-1]} is covered: "
                "give one weight per level, indexed by level"
            )
        raw = [distributor[level] for level in levels]
    else:
        raise ValueError(
            f"distributor {distributor!r} is not a name, an import path, weights or a callable"
        )
    raw = list(raw)
    if len(raw) != len(levels):
        raise ValueError(
            f"{_describe(distributor)} returned {len(raw)} weights for {len(levels)} levels "
            f"{levels}: it must return one weight per level, in the same order"
        )
    return [
        _positive_weight(level, weight, distributor)
        for level, weight in zip(levels, raw, strict=True)
    ]


def _positive_weight(level: int, weight: object, distributor: Distributor) -> Fraction:
    problem = "is not a number"
    if not isinstance(weight, str | bytes | bool):
        try:
            exact = Fraction(weight)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            exact = None
        if exact is not None:
            if exact > 0:
                return exact
            problem = "is not positive"
    raise ValueError(
        f"{_describe(distributor)} gives level {level} the weight {weight!r}, which {problem}: "
        "distributor weights must be finite numbers > 0"
    )


# --- burst from history --------------------------------------------------------------------


def _recent_history(
    reserved: Mapping[int, int], history: Mapping[int, Sequence[int]], window: int
) -> dict[int, list[int]]:
    """Each level's last `window` drained counts, missing runs counted as drained 0."""
    recent: dict[int, list[int]] = {}
    for level, share in reserved.items():
        if share < 0:
            raise ValueError(f"reserved share {share} of level {level} is negative")
        runs = list(history.get(level, ()))[-window:]
        if any(drained < 0 for drained in runs):
            raise ValueError(f"history of level {level} has a negative drained count: {runs}")
        recent[level] = [0] * (window - len(runs)) + runs
    return recent


def burst_eligible(
    reserved: Mapping[int, int],
    history: Mapping[int, Sequence[int]],
    window: int = 6,
    maxout_threshold: int = 4,
) -> set[int]:
    """Levels that maxed out (drained at least their share) in `maxout_threshold` of the window.

    The one definition of eligibility: planning (`_history_burst`) and `drainer status` use it.
    """
    _check_window(window, maxout_threshold)
    recent = _recent_history(reserved, history, window)
    return {
        level
        for level in reserved
        if sum(drained >= reserved[level] for drained in recent[level]) >= maxout_threshold
    }


def burst_allocation(
    reserved: Mapping[int, int],
    history: Mapping[int, Sequence[int]],
    window: int = 6,
    maxout_threshold: int = 4,
) -> dict[int, int]:
    """Per-level allocation after the one permitted burst; the total stays sum(reserved).

    Only the highest eligible level bursts, so capacity flows to the most urgent level that has
    kept filling its share; it takes only what the others left unused at their best recent run,
    so a lender that needs its share again gets it back as soon as its drained count shows it.
    This is the history-only rule (`backlog_aware: false`); with backlog awareness `plan` lets
    the burst take only what no higher level with records waiting wants.
    """
    burster, lendable = _history_burst(reserved, history, window, maxout_threshold)
    allocation = dict(sorted(reserved.items()))
    if burster is None:
        return allocation
    for level, unused in lendable.items():
        allocation[level] -= unused
        allocation[burster] += unused
    return allocation


def _history_burst(
    reserved: Mapping[int, int],
    history: Mapping[int, Sequence[int]],
    window: int,
    maxout_threshold: int,
) -> tuple[int | None, dict[int, int]]:
    """The one level history lets burst (or None) and what every other level left unused.

    A level is eligible when it drained at least its reserved share in `maxout_threshold` of
    its last `window` runs (missing runs drained 0); the highest eligible level is the burster.
    A level `j` left `max(0, reserved_j - most drained in the window)` unused.
    """
    recent = _recent_history(reserved, history, window)
    eligible = burst_eligible(reserved, history, window, maxout_threshold)
    burster = max(eligible, default=None)
    if burster is None:
        return None, {}
    return burster, {
        level: max(0, reserved[level] - max(recent[level]))
        for level in sorted(reserved)
        if level != burster
    }


def _check_window(window: int, maxout_threshold: int) -> None:
    if window < 1:
        raise ValueError(
            f"history_window {window} is too small: set history_window >= 1 "
            "(the number of past runs that decide bursts; default 6)"
        )
    if not 1 <= maxout_threshold <= window:
        raise ValueError(
            f"maxout_threshold {maxout_threshold} is out of range: set 1 <= maxout_threshold "
            f"<= history_window ({window})"
        )


# --- the plan ----------------------------------------------------------------------

TimestampAt = Callable[[int, int, int], int | None]
"""`(level, partition, offset) -> timestamp_ms of the record at offset` (None: unknown)."""

ALIGN_SCOPES = ("level", "drain")
"""Event-time alignment groups: each level's partitions by themselves, or the whole drain's."""


@dataclass(frozen=True)
class PartitionBacklog:
    """What one partition has left to drain, as read from Kafka and the offset map."""

    level: int
    partition: int
    start: int  # committed offset: the first offset not yet done
    end: int  # high watermark (exclusive)
    done: frozenset[int] = frozenset()  # offsets in [start, end) already done: never planned again
    next_timestamp: int | None = None  # ms of the first pending record; None = unknown/empty

    @property
    def backlog(self) -> int:
        """Pending records: offsets in [start, end) not already done."""
        return _pending(self.start, self.end, self.done)


@dataclass(frozen=True)
class PartitionRange:
    """One range to read: [start, end) of a partition, holding `records` not-done offsets."""

    level: int
    partition: int
    start: int
    end: int
    records: int


@dataclass(frozen=True)
class LevelPlan:
    """One level's numbers for this run.

    `burst` is what the history rule moves: positive for the burster, negative for a level that
    lent capacity; `allocated = reserved + burst`. Where `planned` came from:
    `planned = from_reserved + from_burst + handed_on`, where `handed_on` is budget that other
    levels could not use, offered on by backlog awareness (highest level first).
    """

    level: int
    reserved: int
    burst: int
    allocated: int
    backlog: int  # the level's full backlog, before event-time alignment
    planned: int
    available: int = 0  # what event-time alignment lets the level read (= backlog without it)
    from_reserved: int = 0
    from_burst: int = 0
    handed_on: int = 0


@dataclass(frozen=True)
class AlignmentWait:
    """A partition that event-time alignment stops this run, and why.

    It may read only records at most `max_gap` later than `reached_timestamp`, what the run
    reaches in the partition `behind` (the least advanced of the partitions behind it in event
    time). `readable` of its records are that early; `readable == 0` means it waits this run.
    """

    level: int
    partition: int
    next_timestamp: int | None  # its next pending record (ms), None when unknown
    behind: tuple[int, int]  # (level, partition) whose reach holds it
    reached_timestamp: int  # what the run reaches in `behind` (ms)
    limit_timestamp: int  # reached_timestamp + max_gap: nothing later is read
    readable: int  # its pending records up to limit_timestamp
    planned: int

    @property
    def waits(self) -> bool:
        return self.readable == 0

    @property
    def reason(self) -> str:
        """One line for the operator, e.g. for `drainer plan`."""
        ahead = (
            "its next record's time is unknown"
            if self.next_timestamp is None
            else f"its next record is {(self.next_timestamp - self.reached_timestamp) / 1000:,.0f}"
            " s after"
        )
        what = "waits" if self.waits else f"stops after {self.readable:,} records"
        return (
            f"{what}: {ahead} what the run reaches in level {self.behind[0]} partition "
            f"{self.behind[1]}, and nothing later than that plus max_gap is read"
        )


@dataclass(frozen=True)
class Plan:
    """The result of one allocation: per-level numbers and the exact ranges to read."""

    levels: dict[int, LevelPlan]
    ranges: list[PartitionRange]  # records > 0 only, sorted by (level desc, partition)
    alignment: list[AlignmentWait] = field(default_factory=list)  # sorted like `ranges`

    @property
    def held_back(self) -> list[tuple[int, int]]:
        """(level, partition) of the partitions that wait this run for event-time alignment."""
        return [(w.level, w.partition) for w in self.alignment if w.waits]

    @property
    def total_planned(self) -> int:
        """Records this run reads (the sum of planned over levels)."""
        return sum(level.planned for level in self.levels.values())


def plan(
    partitions: Sequence[PartitionBacklog],
    budget: int,
    levels: Iterable[int] | None = None,
    distributor: Distributor = "exponential",
    history: Mapping[int, Sequence[int]] | None = None,
    window: int = 6,
    maxout_threshold: int = 4,
    backlog_aware: bool = True,
    max_gap_ms: int | None = None,
    offset_for_time: OffsetForTime | None = None,
    timestamp_at: TimestampAt | None = None,
    align: str = "level",
) -> Plan:
    """Plan one run: reserved shares, burst, backlog awareness, event-time alignment, ranges.

    `levels` defaults to the levels present in `partitions`; partitions of levels not covered
    (a backfill of some levels) are left out of the plan entirely.
    """
    covered = _covered_levels(sorted({p.level for p in partitions}) if levels is None else levels)
    seen: set[tuple[int, int]] = set()
    for p in partitions:
        if (p.level, p.partition) in seen:
            raise ValueError(f"partition {p.partition} of level {p.level} is listed twice")
        seen.add((p.level, p.partition))
    covered_set = set(covered)
    members = sorted((p for p in partitions if p.level in covered_set), key=_range_order)
    reserved = reserved_shares(covered, budget, distributor)
    burster, lendable = _history_burst(reserved, history or {}, window, maxout_threshold)
    backlog = {level: sum(p.backlog for p in members if p.level == level) for level in covered}

    aligner = _Aligner.make(members, max_gap_ms, offset_for_time, timestamp_at, align)
    if aligner is None:
        numbers = _level_numbers(covered, reserved, burster, lendable, backlog, backlog_aware)
        reads = _split(members, {level: n.planned for level, n in numbers.items()})
        available, waits = backlog, []
    else:
        # What each level can read if given everything (exact per level; an upper bound when
        # levels align with each other), then plan and fill until the plan is what is read.
        reads, _ = aligner.fill(backlog)
        available = _per_level(covered, members, reads)
        for _ in range(2 * len(covered) + 2):
            numbers = _level_numbers(covered, reserved, burster, lendable, available, backlog_aware)
            reads, waits = aligner.fill({level: n.planned for level, n in numbers.items()})
            got = _per_level(covered, members, reads)
            if all(got[level] == numbers[level].planned for level in covered):
                break
            # a level held by older data of another level (`align: drain`) reads less than
            # planned: plan it at most that, so the rest is offered on
            available = {
                level: got[level] if got[level] < numbers[level].planned else available[level]
                for level in covered
            }
        numbers = {level: numbers[level].trimmed(got[level]) for level in covered}

    ranges = [
        PartitionRange(p.level, p.partition, p.start, range_end(p.start, n, p.done), n)
        for p in members
        if (n := reads.get(_key(p), 0)) > 0
    ]
    level_plans = {
        level: LevelPlan(
            level=level,
            reserved=reserved[level],
            burst=numbers[level].burst,
            allocated=reserved[level] + numbers[level].burst,
            backlog=backlog[level],
            planned=numbers[level].planned,
            available=available[level],
            from_reserved=numbers[level].from_reserved,
            from_burst=numbers[level].from_burst,
            handed_on=numbers[level].handed_on,
        )
        for level in covered
    }
    order = {_key(p): i for i, p in enumerate(members)}
    waits = sorted(waits, key=lambda w: order[(w.level, w.partition)])
    return Plan(levels=level_plans, ranges=ranges, alignment=waits)


@dataclass(frozen=True)
class _Numbers:
    burst: int
    from_reserved: int
    from_burst: int
    handed_on: int

    @property
    def planned(self) -> int:
        return self.from_reserved + self.from_burst + self.handed_on

    def trimmed(self, planned: int) -> _Numbers:
        """At most `planned`, taken off what was handed on first, then burst, then reserved."""
        cut = self.planned - planned
        handed = self.handed_on - min(cut, self.handed_on)
        cut -= self.handed_on - handed
        burst = self.from_burst - min(cut, self.from_burst)
        cut -= self.from_burst - burst
        return _Numbers(self.burst, self.from_reserved - cut, burst, handed)


def _level_numbers(
    covered: list[int],
    reserved: Mapping[int, int],
    burster: int | None,
    lendable: Mapping[int, int],
    available: Mapping[int, int],
    backlog_aware: bool,
) -> dict[int, _Numbers]:
    """Each level's planned count and where it came from.

    Without backlog awareness: the history rule alone (`burst_allocation`), capped by what is
    available. With it: every level first uses its reserved share as far as it has records;
    what levels cannot use is offered to the levels with records waiting, highest first, and
    the history burst only takes what no level above the burster wants. So no level is planned
    above its reserved share while a higher level could have been given more.
    """
    if not backlog_aware:
        numbers = {}
        for level in covered:
            burst = (
                sum(lendable.values())
                if level == burster
                else -lendable.get(level, 0)
                if burster is not None
                else 0
            )
            planned = min(reserved[level] + burst, available[level])
            own = min(reserved[level], planned)
            numbers[level] = _Numbers(burst, own, planned - own, 0)
        return numbers

    own = {level: min(reserved[level], available[level]) for level in covered}
    burst = {level: 0 for level in covered}
    taken = {level: 0 for level in covered}  # of its burst, what the burster reads
    handed = {level: 0 for level in covered}
    spare = sum(reserved[level] - own[level] for level in covered)

    def room(level: int) -> int:
        return available[level] - own[level] - taken[level] - handed[level]

    def hand_on(levels: Iterable[int]) -> None:
        nonlocal spare
        for level in sorted(levels, reverse=True):
            take = min(spare, room(level))
            handed[level] += take
            spare -= take

    if burster is not None:
        hand_on(level for level in covered if level > burster)
        # a lender lends only what it cannot use now, and at most what history says it leaves;
        # `burst` is that whole entitlement (as stored and shown), the burster takes of it what
        # it can read, and what it cannot is offered on below
        lent = {j: min(unused, reserved[j] - own[j]) for j, unused in lendable.items()}
        entitled = min(spare, sum(lent.values()))
        taken[burster] = min(entitled, room(burster))
        burst[burster] = entitled
        spare -= taken[burster]
        owed = entitled
        for j in sorted(lent, reverse=True):
            take = min(owed, lent[j])
            burst[j] -= take
            owed -= take
    hand_on(covered)
    return {
        level: _Numbers(burst[level], own[level], taken[level], handed[level]) for level in covered
    }


def _split(
    members: list[PartitionBacklog], planned: Mapping[int, int]
) -> dict[tuple[int, int], int]:
    """Each level's planned count over its partitions, max-min fairly."""
    reads: dict[tuple[int, int], int] = {}
    for level, amount in planned.items():
        own = sorted((p for p in members if p.level == level), key=lambda p: p.partition)
        counts = _water_fill(amount, [p.backlog for p in own])
        reads.update((_key(p), n) for p, n in zip(own, counts, strict=True))
    return reads


def _per_level(
    covered: list[int], members: list[PartitionBacklog], reads: Mapping[tuple[int, int], int]
) -> dict[int, int]:
    total = {level: 0 for level in covered}
    for p in members:
        total[p.level] += reads.get(_key(p), 0)
    return total


@dataclass
class _Aligner:
    """Event-time alignment over groups of partitions: each level, or the whole drain.

    Within a group, partitions are taken oldest-first by their next pending record. The oldest
    reads its whole allocation; every later one reads only records at most `gap_ms` later than
    what the run reaches in the partitions before it (the least advanced of those it does not
    empty), and waits when even its next record is later than that. What a stopped partition cannot read goes to
    the other partitions of its level (the split stays max-min fair under those limits); what
    the level still cannot use, the caller offers to other levels. Lookups are cached: each is
    a Kafka request in production.
    """

    members: list[PartitionBacklog]
    groups: list[list[PartitionBacklog]]
    gap_ms: int
    offset_for_time: OffsetForTime
    timestamp_at: TimestampAt
    _offsets: dict[tuple[int, int, int], int] = field(default_factory=dict)
    _stamps: dict[tuple[int, int, int], int | None] = field(default_factory=dict)

    @classmethod
    def make(
        cls,
        members: list[PartitionBacklog],
        max_gap_ms: int | None,
        offset_for_time: OffsetForTime | None,
        timestamp_at: TimestampAt | None,
        align: str,
    ) -> _Aligner | None:
        if align not in ALIGN_SCOPES:
            raise ValueError(
                f"align {align!r} is unknown: use 'level' (align each level's partitions, the "
                "default) or 'drain' (align all partitions of the drain together)"
            )
        if max_gap_ms is None:
            return None
        if isinstance(max_gap_ms, bool) or not isinstance(max_gap_ms, int) or max_gap_ms < 0:
            raise ValueError(f"max_gap_ms {max_gap_ms!r} is invalid: set max_gap_ms to an int >= 0")
        if offset_for_time is None or timestamp_at is None:
            raise ValueError(
                "max_gap_ms is set but the event-time lookups are missing: pass "
                "offset_for_time(level, partition, timestamp_ms) -> offset and "
                "timestamp_at(level, partition, offset) -> timestamp_ms"
            )
        pending = [p for p in members if p.backlog > 0]
        if align == "drain":
            candidates = [pending]
        else:
            candidates = [
                [p for p in pending if p.level == lvl] for lvl in {p.level for p in pending}
            ]
        # a group without one known time has nothing to align to: it is read as without max_gap
        groups = [
            sorted(group, key=_time_order)
            for group in candidates
            if any(p.next_timestamp is not None for p in group)
        ]
        if not groups:
            return None
        return cls(members, groups, max_gap_ms, offset_for_time, timestamp_at)

    def fill(
        self, amounts: Mapping[int, int]
    ) -> tuple[dict[tuple[int, int], int], list[AlignmentWait]]:
        """Reads per partition for the levels' `amounts`, and the partitions alignment stops."""
        grouped = {_key(p) for group in self.groups for p in group}
        # levels with nothing to align to (no known time in `align: level`): the plain split
        loose = [p for p in self.members if _key(p) not in grouped]
        loose_levels = {p.level for p in loose}
        reads = _split(loose, {lvl: amounts.get(lvl, 0) for lvl in loose_levels})
        waits: list[AlignmentWait] = []
        for group in self.groups:
            group_reads, group_waits = self._fill_group(group, amounts)
            reads.update(group_reads)
            waits.extend(group_waits)
        return reads, waits

    def _fill_group(
        self, group: list[PartitionBacklog], amounts: Mapping[int, int]
    ) -> tuple[dict[tuple[int, int], int], list[AlignmentWait]]:
        """Max-min fair under alignment: a water level per level, as high as its amount allows.

        Every partition reads min(level, what alignment lets it read); raising a level only lets
        later partitions read more (the partitions behind them reach further), so the highest
        level whose total fits the amount is found by bisection. What is left below the next
        level goes one record each to the oldest partitions that can take it.
        """
        by_level: dict[int, list[PartitionBacklog]] = {}
        for p in group:  # oldest first
            by_level.setdefault(p.level, []).append(p)
        water = {level: 0 for level in by_level}
        fixed: dict[tuple[int, int], int] = {}  # shares set explicitly, for the remainder

        def run() -> tuple[dict, dict, dict]:
            shares = {_key(p): fixed.get(_key(p), water[p.level]) for p in group}
            return self._pass(group, shares)

        def total(level: int) -> int:
            reads = run()[0]
            return sum(reads[_key(p)] for p in by_level[level])

        for _ in range(2 if len(by_level) > 1 else 1):  # levels aligned together: two sweeps
            for level, own in by_level.items():
                amount = amounts.get(level, 0)
                for p in own:
                    fixed.pop(_key(p), None)
                low, high = 0, max(p.backlog for p in own)
                water[level] = high
                if total(level) <= amount:
                    continue
                while low < high:  # the highest water level whose total fits
                    water[level] = (low + high + 1) // 2
                    if total(level) <= amount:
                        low = water[level]
                    else:
                        high = water[level] - 1
                water[level] = low
                # the rest: shares frozen where they are, then one more record each, oldest
                # first, then as much as fits, oldest first (each raise lets later ones read on)
                reads = run()[0]
                fixed.update((_key(p), reads[_key(p)]) for p in own)
                for step in (1, None):
                    for p in own:
                        left = amount - total(level)
                        if left <= 0:
                            break
                        base = fixed[_key(p)]
                        low, high = 0, left if step is None else 1
                        while low < high:
                            fixed[_key(p)] = base + (low + high + 1) // 2
                            if total(level) <= amount:
                                low = fixed[_key(p)] - base
                            else:
                                high = fixed[_key(p)] - base - 1
                        fixed[_key(p)] = base + low
                        # keep only what it reads: a share it cannot use now must not make it
                        # read later, when a raise elsewhere lets it, past the amount
                        fixed[_key(p)] = run()[0][_key(p)]
        reads, readable, limits = run()
        waits = [
            AlignmentWait(
                level=p.level,
                partition=p.partition,
                next_timestamp=p.next_timestamp,
                behind=limits[_key(p)][1],
                reached_timestamp=limits[_key(p)][0],
                limit_timestamp=limits[_key(p)][0] + self.gap_ms,
                readable=readable[_key(p)],
                planned=reads[_key(p)],
            )
            for p in group
            if _key(p) in limits and reads[_key(p)] == readable[_key(p)] < p.backlog
        ]
        return reads, waits

    def _pass(self, group: list[PartitionBacklog], shares: Mapping[tuple[int, int], int]):
        """One oldest-first pass: what each partition reads of its share under alignment."""
        reads: dict[tuple[int, int], int] = {}
        readable: dict[tuple[int, int], int] = {}
        limits: dict[tuple[int, int], tuple[int, tuple[int, int]]] = {}
        reached: list[tuple[int, tuple[int, int]]] = []  # (what the run reaches, partition)
        for p in group:
            key = _key(p)
            cap = p.end
            if reached:
                watermark = min(reached)
                limit = watermark[0] + self.gap_ms
                cap = self._offset(p, limit + 1)
                if p.next_timestamp is not None and p.next_timestamp <= limit:
                    # within the gap: it makes progress even if the lookup disagrees
                    # (out-of-order timestamps)
                    cap = max(cap, range_end(p.start, 1, p.done))
                if _pending(p.start, cap, p.done) < p.backlog:
                    limits[key] = watermark
            readable[key] = _pending(p.start, cap, p.done)
            reads[key] = min(shares.get(key, 0), readable[key])
            reach = self._reach(p, reads[key])
            # a partition this run empties holds nobody back: nothing of it is left behind
            if reach is not None and reads[key] < p.backlog:
                reached.append((reach, key))
        return reads, readable, limits

    def _offset(self, p: PartitionBacklog, timestamp_ms: int) -> int:
        """First offset at or after `timestamp_ms`, clamped to [start, end]."""
        lookup = (p.level, p.partition, timestamp_ms)
        if lookup not in self._offsets:
            self._offsets[lookup] = self.offset_for_time(*lookup)
        found = self._offsets[lookup]
        if found < 0:  # Kafka's "no such offset": every record is earlier
            return p.end
        return min(max(found, p.start), p.end)

    def _reach(self, p: PartitionBacklog, count: int) -> int | None:
        """The time the run reaches in `p` reading `count` records: its last one's, else its next."""
        if count == 0:
            return p.next_timestamp
        lookup = (p.level, p.partition, range_end(p.start, count, p.done) - 1)
        if lookup not in self._stamps:
            self._stamps[lookup] = self.timestamp_at(*lookup)
        stamp = self._stamps[lookup]
        if stamp is None or p.next_timestamp is None:
            return stamp if stamp is not None else p.next_timestamp
        return max(stamp, p.next_timestamp)


def range_end(start: int, count: int, done: frozenset[int]) -> int:
    """The offset just past the `count`-th not-done offset from `start` (`start` if count is 0)."""
    if count <= 0:
        return start
    end = start + count
    for offset in sorted(o for o in done if o >= start):
        if offset >= end:
            break
        end += 1  # a done offset inside the range: reach one further for the same count
    return end


def _water_fill(amount: int, caps: list[int]) -> list[int]:
    """Max-min fair integer split of `amount` (<= sum(caps)) under per-slot caps.

    Equal shares, capped; what a capped slot cannot take is spread over the rest; integer
    remainders go to the lowest slots, so the split is deterministic.
    """
    given = [0] * len(caps)
    remaining, left = amount, len(caps)
    order = sorted(range(len(caps)), key=lambda i: (caps[i], i))
    for position, index in enumerate(order):
        if caps[index] <= remaining // left:
            given[index] = caps[index]
            remaining -= caps[index]
            left -= 1
            continue
        share, extra = divmod(remaining, left)
        for rank, other in enumerate(sorted(order[position:])):
            given[other] = share + (1 if rank < extra else 0)
        break
    return given


def _pending(start: int, stop: int, done: frozenset[int]) -> int:
    span = max(0, stop - start)
    if span == 0:
        return 0
    return span - sum(1 for offset in done if start <= offset < stop)


def _key(p: PartitionBacklog) -> tuple[int, int]:
    return (p.level, p.partition)


def _range_order(p: PartitionBacklog) -> tuple[int, int]:
    return (-p.level, p.partition)


def _time_order(p: PartitionBacklog) -> tuple[bool, int, int, int]:
    """Oldest next pending record first; unknown times last (they cannot lead the alignment)."""
    return (p.next_timestamp is None, p.next_timestamp or 0, -p.level, p.partition)
