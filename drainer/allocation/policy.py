"""The one allocation interface: an `AllocationPolicy` built from a drain's settings and history.

`AllocationPolicy(...).plan(backlogs)` combines the rules of this package in their order:
late records first (`wait`, `max_wait`), the byte budget's caps (`bytes`), reserved shares (`shares`), burst from history
(`burst`), backlog awareness (`levels`), event-time alignment (`align`), and the max-min fair
split into ranges (`fill`). The policy holds plain values only (the Kafka lookups alignment and
`max_wait` need are passed in as callables), so allocation never imports the configuration;
`drainer.lifecycle.planning.allocation_policy` builds one from a `DrainConfig`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from drainer.allocation.align import Aligner, check_alignment
from drainer.allocation.burst import burst_allocation, burst_eligible, check_window, history_burst
from drainer.allocation.bytes import (
    byte_caps,
    check_byte_budget,
    level_record_size,
    planned_bytes,
)
from drainer.allocation.fill import key_of, per_level, range_end, range_order, split
from drainer.allocation.levels import LevelNumbers, level_numbers
from drainer.allocation.shares import Distributor, check_budget, covered_levels, reserved_shares
from drainer.allocation.types import (
    AlignmentWait,
    LevelPlan,
    OffsetForTime,
    PartitionBacklog,
    PartitionRange,
    Plan,
    TimestampAt,
)
from drainer.allocation.wait import (
    check_max_wait,
    late_grants,
    late_records,
    oldest_first_floors,
    shares_after_grants,
)


@dataclass(frozen=True)
class AllocationPolicy:
    """How one drain shares a run's budget; `plan(backlogs)` applies it to the current backlog.

    `levels` are the covered levels (a backfill covers some); None means the levels present in
    the backlog. `history` is each covered level's drained counts of its recent runs, oldest
    first. `max_gap_ms` turns event-time alignment on and then needs both lookups.
    `max_wait_ms` (per level, ms) serves records older than that first; it needs `now_ms` and
    `offset_for_time`. With `now_ms`, each level reports its oldest pending record's age.
    `budget_bytes` caps each level's records at its share of that many bytes, at the average
    record sizes `record_bytes` (per (level, partition), bytes); without both, no byte rule.
    """

    budget: int
    levels: Iterable[int] | None = None
    distributor: Distributor = "exponential"
    history: Mapping[int, Sequence[int]] = field(default_factory=dict)
    window: int = 6
    maxout_threshold: int = 4
    backlog_aware: bool = True
    max_gap_ms: int | None = None
    align: str = "level"
    offset_for_time: OffsetForTime | None = None
    timestamp_at: TimestampAt | None = None
    max_wait_ms: Mapping[int, int] | None = None
    now_ms: int | None = None
    budget_bytes: int | None = None
    record_bytes: Mapping[tuple[int, int], float] | None = None

    def __post_init__(self) -> None:
        check_budget(self.budget)
        check_window(self.window, self.maxout_threshold)
        check_alignment(self.max_gap_ms, self.offset_for_time, self.timestamp_at, self.align)
        check_max_wait(self.max_wait_ms, self.offset_for_time, self.now_ms)
        check_byte_budget(self.budget_bytes, self.record_bytes)
        if self.levels is not None:
            # a tuple, so that a generator or range passed in is read once and stays as given
            object.__setattr__(self, "levels", tuple(covered_levels(self.levels)))
            self.reserved()  # a budget too small for the levels fails here, not at plan time

    def reserved(self) -> dict[int, int]:
        """Each covered level's reserved share of the budget (the policy must name its levels)."""
        return reserved_shares(self._covered(None), self.budget, self.distributor)

    def history_allocation(self) -> dict[int, int]:
        """Each level's share after the history burst alone (what `backlog_aware: false` plans)."""
        return burst_allocation(self.reserved(), self.history, self.window, self.maxout_threshold)

    def burst_eligible(self) -> set[int]:
        """The levels whose history lets them burst (the highest of them does)."""
        return burst_eligible(self.reserved(), self.history, self.window, self.maxout_threshold)

    def plan(self, backlogs: Sequence[PartitionBacklog]) -> Plan:
        """Plan one run: reserved shares, burst, backlog awareness, event-time alignment, ranges.

        Partitions of levels the policy does not cover (a backfill of some levels) are left out
        of the plan entirely.
        """
        covered = self._covered(sorted({p.level for p in backlogs}))
        seen: set[tuple[int, int]] = set()
        for p in backlogs:
            if key_of(p) in seen:
                raise ValueError(f"partition {p.partition} of level {p.level} is listed twice")
            seen.add(key_of(p))
        covered_set = set(covered)
        members = sorted((p for p in backlogs if p.level in covered_set), key=range_order)
        reserved = reserved_shares(covered, self.budget, self.distributor)
        burster, lendable = history_burst(
            reserved, self.history, self.window, self.maxout_threshold
        )
        backlog = {level: sum(p.backlog for p in members if p.level == level) for level in covered}

        caps = self._byte_caps(members, reserved, backlog)
        late = self._late(members)
        late_by_level = {level: 0 for level in covered}
        for (level, _), count in late.items():
            late_by_level[level] += count

        def numbers_for(available: Mapping[int, int]) -> dict[int, LevelNumbers]:
            if caps is not None:  # no level reads beyond its share of the byte budget
                available = {level: min(available[level], caps[level]) for level in covered}
            if not late:
                return level_numbers(
                    covered, reserved, burster, lendable, available, self.backlog_aware
                )
            # late records first (before any burst); the rest of the budget as usual
            due = {level: min(late_by_level[level], available[level]) for level in covered}
            grants = late_grants(covered, due, self.budget)
            shares = shares_after_grants(reserved, grants, available)
            left = {level: available[level] - grants[level] for level in covered}
            lent = {level: min(unused, shares[level]) for level, unused in lendable.items()}
            numbers = level_numbers(covered, shares, burster, lent, left, self.backlog_aware)
            return {level: numbers[level].after_grant(grants[level]) for level in covered}

        aligner = Aligner.make(
            members, self.max_gap_ms, self.offset_for_time, self.timestamp_at, self.align
        )
        waits: list[AlignmentWait] = []
        if aligner is None:
            numbers = numbers_for(backlog)
            planned = {level: n.planned for level, n in numbers.items()}
            reads = split(members, planned, floors=self._oldest_first(members, late, planned))
            available: Mapping[int, int] = backlog
        else:
            # What each level can read if given everything (exact per level; an upper bound when
            # levels align with each other), then plan and fill until the plan is what is read.
            reads, _ = aligner.fill(backlog)
            available = per_level(covered, members, reads)
            for _ in range(2 * len(covered) + 2):
                numbers = numbers_for(available)
                reads, waits = aligner.fill({level: n.planned for level, n in numbers.items()})
                got = per_level(covered, members, reads)
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
            if (n := reads.get(key_of(p), 0)) > 0
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
                late=late_by_level[level],
                for_max_wait=numbers[level].for_max_wait,
                oldest_age_s=self._oldest_age_s([p for p in members if p.level == level]),
            )
            for level in covered
        }
        if caps is not None:
            estimate = planned_bytes(reads, self.record_bytes or {})
            level_plans = {
                level: replace(lp, byte_cap=caps[level], planned_bytes=estimate.get(level, 0))
                for level, lp in level_plans.items()
            }
        order = {key_of(p): i for i, p in enumerate(members)}
        waits = sorted(waits, key=lambda w: order[(w.level, w.partition)])
        return Plan(levels=level_plans, ranges=ranges, alignment=waits)

    def _byte_caps(
        self,
        members: list[PartitionBacklog],
        reserved: Mapping[int, int],
        backlog: Mapping[int, int],
    ) -> dict[int, int] | None:
        """Each level's records within its share of `budget_bytes` (None: no byte budget)."""
        if self.budget_bytes is None or not self.record_bytes:
            return None
        sizes = level_record_size(members, self.record_bytes)
        return byte_caps(reserved, backlog, sizes, self.budget_bytes)

    def _late(self, members: list[PartitionBacklog]) -> dict[tuple[int, int], int]:
        if not self.max_wait_ms or self.now_ms is None or self.offset_for_time is None:
            return {}
        return late_records(members, self.max_wait_ms, self.now_ms, self.offset_for_time)

    def _oldest_first(
        self,
        members: list[PartitionBacklog],
        late: dict[tuple[int, int], int],
        planned: Mapping[int, int],
    ) -> dict[tuple[int, int], int]:
        """The late records each partition reads first; a level planned short of its late
        records reads them oldest first by time across its partitions (`wait.oldest_first`)."""
        if not late or not self.max_wait_ms or self.now_ms is None or not self.offset_for_time:
            return late
        return oldest_first_floors(
            members, late, planned, self.max_wait_ms, self.now_ms, self.offset_for_time
        )

    def _oldest_age_s(self, members: list[PartitionBacklog]) -> float | None:
        """Seconds since the oldest known next pending record of `members` (None: unknown)."""
        stamps = [p.next_timestamp for p in members if p.backlog and p.next_timestamp is not None]
        if self.now_ms is None or not stamps:
            return None
        return max(0, self.now_ms - min(stamps)) / 1000

    def _covered(self, present: Iterable[int] | None) -> list[int]:
        if self.levels is not None:
            return list(self.levels)
        if present is None:
            raise ValueError(
                "the policy covers the levels present in the backlog (levels=None): "
                "pass the levels, or build the policy with levels"
            )
        return covered_levels(present)
