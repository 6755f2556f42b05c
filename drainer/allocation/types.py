"""The plain values allocation works on: a partition's backlog in, a run's plan out.

No rule lives here; every other module of the package reads or builds these. `pending` is here
because a backlog's size is part of what a backlog is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

OffsetForTime = Callable[[int, int, int], int]
"""`(level, partition, timestamp_ms) -> first offset with timestamp >= timestamp_ms` (else end)."""


TimestampAt = Callable[[int, int, int], int | None]
"""`(level, partition, offset) -> timestamp_ms of the record at offset` (None: unknown)."""


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
        return pending(self.start, self.end, self.done)

    @property
    def first_pending(self) -> int:
        """The first offset from `start` not already done (where a read of it begins)."""
        first = self.start
        while first in self.done:
            first += 1
        return first


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
    `planned = for_max_wait + from_reserved + from_burst + handed_on`, where `for_max_wait` is
    what the level got first for its `late` records (older than its `max_wait`), and `handed_on`
    is budget that other levels could not use, offered on by backlog awareness (highest first).
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
    late: int = 0  # pending records older than the level's max_wait (0 without max_wait)
    for_max_wait: int = 0  # of `planned`, what the level got first for its late records
    oldest_age_s: float | None = None  # age of its oldest pending record, when known
    byte_cap: int | None = None  # records its share of `budget_bytes` holds (None: no budget)
    planned_bytes: int | None = None  # estimated record bytes of `planned` (with byte_cap)


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


def pending(start: int, stop: int, done: frozenset[int]) -> int:
    span = max(0, stop - start)
    if span == 0:
        return 0
    return span - sum(1 for offset in done if start <= offset < stop)
