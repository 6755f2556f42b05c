"""From per-level counts to per-partition reads: max-min fair water filling, and range ends.

Within a level, every partition gets an equal share capped by its backlog, and what a capped
partition cannot take is spread over the rest, so no partition of a level starves while another
reads more than it needs. `range_end` turns a count into an offset past the done offsets.
"""

from __future__ import annotations

from collections.abc import Mapping

from drainer.allocation.types import PartitionBacklog


def split(
    members: list[PartitionBacklog],
    planned: Mapping[int, int],
    floors: Mapping[tuple[int, int], int] | None = None,
) -> dict[tuple[int, int], int]:
    """Each level's planned count over its partitions, max-min fairly.

    `floors` (the late records of `max_wait`) are served first: a level's count goes to them,
    max-min fairly, before the rest is split over what its partitions have left. (The policy
    passes floors that a count short of them fills exactly, oldest first by time:
    `wait.oldest_first`.)
    """
    reads: dict[tuple[int, int], int] = {}
    for level, amount in planned.items():
        own = sorted((p for p in members if p.level == level), key=lambda p: p.partition)
        late = [(floors or {}).get(key_of(p), 0) for p in own]
        first = water_fill(min(amount, sum(late)), late)
        left = [p.backlog - n for p, n in zip(own, first, strict=True)]
        rest = water_fill(amount - sum(first), left)
        reads.update((key_of(p), a + b) for p, a, b in zip(own, first, rest, strict=True))
    return reads


def per_level(
    covered: list[int], members: list[PartitionBacklog], reads: Mapping[tuple[int, int], int]
) -> dict[int, int]:
    total = {level: 0 for level in covered}
    for p in members:
        total[p.level] += reads.get(key_of(p), 0)
    return total


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


def water_fill(amount: int, caps: list[int]) -> list[int]:
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


def key_of(p: PartitionBacklog) -> tuple[int, int]:
    return (p.level, p.partition)


def range_order(p: PartitionBacklog) -> tuple[int, int]:
    return (-p.level, p.partition)


def time_order(p: PartitionBacklog) -> tuple[bool, int, int, int]:
    """Oldest next pending record first; unknown times last (they cannot lead the alignment)."""
    return (p.next_timestamp is None, p.next_timestamp or 0, -p.level, p.partition)
