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

from drainer.callables import load_callable

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


# --- reserved shares (§4.1) ---------------------------------------------------------------------


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


# --- burst from history (§4.2) --------------------------------------------------------------------


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
    """Levels that maxed out (drained at least their share) in `maxout_threshold` of the window."""
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
    """
    eligible = burst_eligible(reserved, history, window, maxout_threshold)
    recent = _recent_history(reserved, history, window)
    burster = max(eligible, default=None)
    allocation = dict(sorted(reserved.items()))
    if burster is None:
        return allocation
    for level in allocation:
        if level != burster:
            unused = max(0, reserved[level] - max(recent[level]))
            allocation[level] -= unused
            allocation[burster] += unused
    return allocation


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


# --- the plan (§4.3-4.5) ----------------------------------------------------------------------


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
    """One level's numbers for this run; `burst` is negative for a level that lent capacity."""

    level: int
    reserved: int
    burst: int
    allocated: int
    backlog: int  # the level's full backlog, before event-time alignment
    planned: int


@dataclass(frozen=True)
class Plan:
    """The result of one allocation: per-level numbers and the exact ranges to read."""

    levels: dict[int, LevelPlan]
    ranges: list[PartitionRange]  # records > 0 only, sorted by (level desc, partition)
    cutoff_timestamp: int | None = None  # t_min + max_gap when alignment applied
    held_back: list[tuple[int, int]] = field(default_factory=list)  # (level, partition)

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
) -> Plan:
    """Plan one run: reserved shares, burst, event-time alignment, backlog awareness, ranges.

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
    allocated = burst_allocation(reserved, history or {}, window, maxout_threshold)

    caps, cutoff, held_back = _align(members, max_gap_ms, offset_for_time)
    available = {_key(p): _pending(p.start, caps[_key(p)], p.done) for p in members}
    level_available = {level: 0 for level in covered}
    for p in members:
        level_available[p.level] += available[_key(p)]

    if backlog_aware:
        allocated = _return_to_lenders(reserved, allocated, level_available)
    planned = {level: min(allocated[level], level_available[level]) for level in covered}
    if backlog_aware:
        spare = sum(allocated[level] - planned[level] for level in covered)
        for level in reversed(covered):
            take = min(spare, level_available[level] - planned[level])
            planned[level] += take
            spare -= take

    ranges: list[PartitionRange] = []
    for level in reversed(covered):
        own = sorted((p for p in members if p.level == level), key=lambda p: p.partition)
        counts = _water_fill(planned[level], [available[_key(p)] for p in own])
        ranges.extend(
            PartitionRange(p.level, p.partition, p.start, range_end(p.start, n, p.done), n)
            for p, n in zip(own, counts, strict=True)
            if n > 0
        )

    level_plans = {
        level: LevelPlan(
            level=level,
            reserved=reserved[level],
            burst=allocated[level] - reserved[level],
            allocated=allocated[level],
            backlog=sum(p.backlog for p in members if p.level == level),
            planned=planned[level],
        )
        for level in covered
    }
    return Plan(levels=level_plans, ranges=ranges, cutoff_timestamp=cutoff, held_back=held_back)


def _return_to_lenders(
    reserved: Mapping[int, int], allocated: Mapping[int, int], available: Mapping[int, int]
) -> dict[int, int]:
    """A lender with records waiting takes back up to its reserved share from the burster.

    History alone would starve it: a lender is allocated at most what it drained in the window,
    so its history could never show that it needs more. With backlog awareness the burst only
    takes capacity that lenders cannot use now, highest lender first (burst capacity
    is given back as soon as other levels need it).
    """
    result = dict(allocated)
    burster = next((lvl for lvl in result if result[lvl] > reserved[lvl]), None)
    if burster is None:
        return result
    for level in sorted(result, reverse=True):
        need = min(reserved[level], available[level]) - result[level]
        if level == burster or need <= 0:
            continue
        give = min(need, result[burster] - reserved[burster])
        result[level] += give
        result[burster] -= give
    return result


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


def _align(
    members: list[PartitionBacklog],
    max_gap_ms: int | None,
    offset_for_time: OffsetForTime | None,
) -> tuple[dict[tuple[int, int], int], int | None, list[tuple[int, int]]]:
    """Readable end per partition under event-time alignment (§4.5), the cutoff, the held back.

    Keeps drained streams within `max_gap_ms` of each other in event time, so a downstream join
    or window is not flooded by one partition racing ahead of the others.
    """
    caps = {_key(p): max(p.start, p.end) for p in members}
    if max_gap_ms is None:
        return caps, None, []
    if isinstance(max_gap_ms, bool) or not isinstance(max_gap_ms, int) or max_gap_ms < 0:
        raise ValueError(f"max_gap_ms {max_gap_ms!r} is invalid: set max_gap_ms to an int >= 0")
    if offset_for_time is None:
        raise ValueError(
            "max_gap_ms is set but no offset_for_time lookup was given: "
            "pass offset_for_time(level, partition, timestamp_ms) -> offset"
        )
    known = [p.next_timestamp for p in members if p.backlog > 0 and p.next_timestamp is not None]
    if not known:
        return caps, None, []
    cutoff = min(known) + max_gap_ms
    held_back: list[tuple[int, int]] = []
    for p in members:
        if p.backlog == 0:
            continue
        cap = offset_for_time(p.level, p.partition, cutoff + 1)
        if cap < 0:  # Kafka's "no such offset": every record is at or before the cutoff
            cap = p.end
        cap = min(max(cap, p.start), p.end)
        if p.next_timestamp is not None and p.next_timestamp <= cutoff:
            # Its next record is within the gap (t_min's partition is always such a one), so it
            # must make progress even if the lookup disagrees (e.g. out-of-order timestamps).
            cap = max(cap, range_end(p.start, 1, p.done))
        caps[_key(p)] = cap
        if _pending(p.start, cap, p.done) == 0:
            held_back.append(_key(p))
    return caps, cutoff, held_back


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
