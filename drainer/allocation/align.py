"""Event-time alignment (`max_gap_ms`): no partition runs ahead of the others in event time.

Within a group (a level's partitions, or the whole drain's), the partition furthest behind
reads its whole share; every later one reads only records at most `max_gap_ms` after what the
run reaches in the partitions behind it. The Kafka lookups it needs are passed in as callables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from drainer.allocation.fill import key_of, range_end, split, time_order
from drainer.allocation.types import (
    AlignmentWait,
    OffsetForTime,
    PartitionBacklog,
    TimestampAt,
    pending,
)

ALIGN_SCOPES = ("level", "drain")
"""Event-time alignment groups: each level's partitions by themselves, or the whole drain's."""


def check_alignment(
    max_gap_ms: int | None,
    offset_for_time: OffsetForTime | None,
    timestamp_at: TimestampAt | None,
    align: str,
) -> None:
    """The alignment settings make sense together: a known scope, a gap >= 0, its lookups."""
    if align not in ALIGN_SCOPES:
        raise ValueError(
            f"align {align!r} is unknown: use 'level' (align each level's partitions, the "
            "default) or 'drain' (align all partitions of the drain together)"
        )
    if max_gap_ms is None:
        return
    if isinstance(max_gap_ms, bool) or not isinstance(max_gap_ms, int) or max_gap_ms < 0:
        raise ValueError(f"max_gap_ms {max_gap_ms!r} is invalid: set max_gap_ms to an int >= 0")
    if offset_for_time is None or timestamp_at is None:
        raise ValueError(
            "max_gap_ms is set but the event-time lookups are missing: pass "
            "offset_for_time(level, partition, timestamp_ms) -> offset and "
            "timestamp_at(level, partition, offset) -> timestamp_ms"
        )


_Pass = tuple[
    dict[tuple[int, int], int],
    dict[tuple[int, int], int],
    dict[tuple[int, int], tuple[int, tuple[int, int]]],
]
"""One pass: reads, readable records and alignment limits per (level, partition)."""


@dataclass
class Aligner:
    """Event-time alignment over groups of partitions: each level, or the whole drain.

    Within a group, partitions are taken oldest-first by their next pending record. The oldest
    reads its whole allocation; every later one reads only records at most `gap_ms` later than
    what the run reaches in the partitions before it (the least advanced of those it does not
    empty), and waits when even its next record is later than that. What a stopped partition
    cannot read goes to the other partitions of its level (the split stays max-min fair under
    those limits); what the level still cannot use, the caller offers to other levels. Lookups
    are cached: each is a Kafka request in production.
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
    ) -> Aligner | None:
        check_alignment(max_gap_ms, offset_for_time, timestamp_at, align)
        if max_gap_ms is None or offset_for_time is None or timestamp_at is None:
            return None
        waiting = [p for p in members if p.backlog > 0]
        if align == "drain":
            candidates = [waiting]
        else:
            candidates = [
                [p for p in waiting if p.level == lvl] for lvl in {p.level for p in waiting}
            ]
        # a group without one known time has nothing to align to: it is read as without max_gap
        groups = [
            sorted(group, key=time_order)
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
        grouped = {key_of(p) for group in self.groups for p in group}
        # levels with nothing to align to (no known time in `align: level`): the plain split
        loose = [p for p in self.members if key_of(p) not in grouped]
        loose_levels = {p.level for p in loose}
        reads = split(loose, {lvl: amounts.get(lvl, 0) for lvl in loose_levels})
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

        def run() -> _Pass:
            shares = {key_of(p): fixed.get(key_of(p), water[p.level]) for p in group}
            return self._pass(group, shares)

        def total(level: int) -> int:
            reads = run()[0]
            return sum(reads[key_of(p)] for p in by_level[level])

        for _ in range(2 if len(by_level) > 1 else 1):  # levels aligned together: two sweeps
            for level, own in by_level.items():
                amount = amounts.get(level, 0)
                for p in own:
                    fixed.pop(key_of(p), None)
                low, high = 0, max(p.backlog for p in own)
                water[level] = high
                if total(level) <= amount:
                    # it reads all alignment lets it, within its amount: keep its shares at
                    # what it reads, or a later level's raise (levels aligned together) lets
                    # it read past its amount with the shares it could not use now
                    reads = run()[0]
                    fixed.update((key_of(p), reads[key_of(p)]) for p in own)
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
                fixed.update((key_of(p), reads[key_of(p)]) for p in own)
                for step in (1, None):
                    for p in own:
                        left = amount - total(level)
                        if left <= 0:
                            break
                        base = fixed[key_of(p)]
                        low, high = 0, left if step is None else 1
                        while low < high:
                            fixed[key_of(p)] = base + (low + high + 1) // 2
                            if total(level) <= amount:
                                low = fixed[key_of(p)] - base
                            else:
                                high = fixed[key_of(p)] - base - 1
                        fixed[key_of(p)] = base + low
                        # keep only what it reads: a share it cannot use now must not make it
                        # read later, when a raise elsewhere lets it, past the amount
                        fixed[key_of(p)] = run()[0][key_of(p)]
        reads, readable, limits = run()
        waits = [
            AlignmentWait(
                level=p.level,
                partition=p.partition,
                next_timestamp=p.next_timestamp,
                behind=limits[key_of(p)][1],
                reached_timestamp=limits[key_of(p)][0],
                limit_timestamp=limits[key_of(p)][0] + self.gap_ms,
                readable=readable[key_of(p)],
                planned=reads[key_of(p)],
            )
            for p in group
            if key_of(p) in limits and reads[key_of(p)] == readable[key_of(p)] < p.backlog
        ]
        return reads, waits

    def _pass(self, group: list[PartitionBacklog], shares: Mapping[tuple[int, int], int]) -> _Pass:
        """One oldest-first pass: what each partition reads of its share under alignment."""
        reads: dict[tuple[int, int], int] = {}
        readable: dict[tuple[int, int], int] = {}
        limits: dict[tuple[int, int], tuple[int, tuple[int, int]]] = {}
        reached: list[tuple[int, tuple[int, int]]] = []  # (what the run reaches, partition)
        for p in group:
            key = key_of(p)
            cap = p.end
            if reached:
                watermark = min(reached)
                limit = watermark[0] + self.gap_ms
                cap = self._offset(p, limit + 1)
                if p.next_timestamp is not None and p.next_timestamp <= limit:
                    # within the gap: it makes progress even if the lookup disagrees
                    # (out-of-order timestamps)
                    cap = max(cap, range_end(p.start, 1, p.done))
                if pending(p.start, cap, p.done) < p.backlog:
                    limits[key] = watermark
            readable[key] = pending(p.start, cap, p.done)
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
