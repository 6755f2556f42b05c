"""Maximum wait (`max_wait`): records older than their level's limit are served first.

A partition's late records are its pending ones with a timestamp before `now - max_wait`; since a
run reads each partition from its committed offset, they are the first ones it reads. Before any
burst, each level is granted enough of the budget to read its late records, highest level first
when they exceed the budget; the grant counts first against the level's own reserved share, and
what it needs beyond that comes out of the other levels' shares, first what they cannot use, then
the lowest level's first. The rest of the budget is shared by the usual rules.

When a level's grant does not cover all its late records, they are read oldest first by time
across its partitions (`oldest_first`): a bounded binary search over time, with the same
`offset_for_time` lookup, finds a cutoff such that the late records older than it fit the
grant; each partition reads those, and what is left of the grant is split max-min fairly over
the records just after the cutoff.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from drainer.allocation.fill import key_of, water_fill
from drainer.allocation.types import OffsetForTime, PartitionBacklog, pending


def check_max_wait(
    max_wait_ms: Mapping[int, int] | None,
    offset_for_time: OffsetForTime | None,
    now_ms: int | None,
) -> None:
    """Per-level limits in ms > 0, and the lookup and clock that find the late records."""
    if not max_wait_ms:
        return
    for level, limit in max_wait_ms.items():
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise ValueError(f"max_wait names level {level!r}: levels are integers 0..N-1")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ValueError(
                f"max_wait of level {level} is {limit!r} ms: set a duration > 0, e.g. 15m or 1h"
            )
    if offset_for_time is None or now_ms is None:
        raise ValueError(
            "max_wait is set but the policy cannot find late records: pass now_ms (the wall "
            "clock, ms) and offset_for_time(level, partition, timestamp_ms) -> offset"
        )


def late_records(
    members: list[PartitionBacklog],
    max_wait_ms: Mapping[int, int],
    now_ms: int,
    offset_for_time: OffsetForTime,
) -> dict[tuple[int, int], int]:
    """Per partition, how many of its pending records are older than its level's max_wait.

    A partition whose next pending record is known to be recent enough needs no lookup.
    """
    late: dict[tuple[int, int], int] = {}
    for p in members:
        limit = max_wait_ms.get(p.level)
        if limit is None or p.backlog == 0:
            continue
        cutoff = now_ms - limit  # records before it have waited longer than `limit`
        if p.next_timestamp is not None and p.next_timestamp >= cutoff:
            continue
        found = offset_for_time(p.level, p.partition, cutoff)
        stop = p.end if found < 0 else min(max(found, p.start), p.end)
        if count := pending(p.start, stop, p.done):
            late[key_of(p)] = count
    return late


def late_grants(
    covered: list[int], late_by_level: Mapping[int, int], budget: int
) -> dict[int, int]:
    """What each level gets for its late records: all of them, highest level first, in budget."""
    grants = {}
    left = budget
    for level in sorted(covered, reverse=True):
        grants[level] = min(late_by_level.get(level, 0), left)
        left -= grants[level]
    return grants


def shares_after_grants(
    reserved: Mapping[int, int], grants: Mapping[int, int], available: Mapping[int, int]
) -> dict[int, int]:
    """The reserved shares of the budget the grants leave, for the usual rules to share.

    A level's grant uses its own share first; what a grant needs beyond that is taken from the
    other levels' shares: first what they could not use anyway, then from the lowest level up.
    Without grants the shares are unchanged. They sum to `sum(reserved) - sum(grants)`.
    """
    own = {level: min(grants.get(level, 0), share) for level, share in reserved.items()}
    rest = {level: reserved[level] - own[level] for level in reserved}
    owed = sum(grants.get(level, 0) - own[level] for level in reserved)
    unusable = {
        level: max(0, rest[level] - (available[level] - grants.get(level, 0))) for level in rest
    }
    for pool in (unusable, rest):
        for level in sorted(rest):
            take = min(owed, pool[level], rest[level])
            rest[level] -= take
            owed -= take
    return rest


CUTOFF_LOOKUPS = 256
"""Most `offset_for_time` lookups one level's oldest-first split makes (one per late partition
per step of the search over time): a level with more late partitions than this falls back to the
max-min fair split of its grant."""

CUTOFF_STEPS = 32
"""Most halvings of the search interval (32: a day's interval narrowed to well under 1 ms)."""


def oldest_first_floors(
    members: Sequence[PartitionBacklog],
    late: Mapping[tuple[int, int], int],
    planned: Mapping[int, int],
    max_wait_ms: Mapping[int, int],
    now_ms: int,
    offset_for_time: OffsetForTime,
) -> dict[tuple[int, int], int]:
    """The late records each partition reads first: all of them where the level's planned
    count covers its late records, else the planned count over them oldest first by time."""
    floors = dict(late)
    for level, amount in planned.items():
        own = [p for p in members if p.level == level and late.get(key_of(p), 0) > 0]
        if not own or amount >= sum(late[key_of(p)] for p in own):
            continue
        floors.update(oldest_first(own, late, amount, now_ms - max_wait_ms[level], offset_for_time))
    return floors


def oldest_first(
    own: Sequence[PartitionBacklog],
    late: Mapping[tuple[int, int], int],
    amount: int,
    cutoff_ms: int,
    offset_for_time: OffsetForTime,
    lookups: int = CUTOFF_LOOKUPS,
) -> dict[tuple[int, int], int]:
    """`amount` (less than their late records) over one level's late partitions `own`, oldest
    first by time.

    A binary search over time keeps `lo` and `hi` such that the late records before `lo` fit
    `amount` and those before `hi` do not (at first: nothing before the oldest next pending
    record, everything before the level's `cutoff_ms`). Each partition reads its records before
    `lo`, and the rest of `amount` is split max-min fairly over the records in `[lo, hi)`. So no
    record read is `hi - lo` ms or more younger than a late record left unread; the search stops
    at 1 ms, after `CUTOFF_STEPS` halvings, or when the next step would pass `lookups`.
    """
    keys = [key_of(p) for p in own]
    stamps = [p.next_timestamp for p in own if p.next_timestamp is not None]
    lo = min(stamps) if len(stamps) == len(own) else 0  # no record is older than the oldest
    lo_counts = [0] * len(own)
    hi, hi_counts = cutoff_ms, [late[k] for k in keys]

    def before(ts: int) -> list[int]:
        counts = []
        for p, k in zip(own, keys, strict=True):
            if p.next_timestamp is not None and ts <= p.next_timestamp:
                counts.append(0)  # its next pending record is not older than ts
                continue
            found = offset_for_time(p.level, p.partition, ts)
            stop = p.end if found < 0 else min(max(found, p.start), p.end)
            counts.append(min(late[k], pending(p.start, stop, p.done)))
        return counts

    steps = min(CUTOFF_STEPS, lookups // len(own))
    for _ in range(steps):
        if hi - lo <= 1:
            break
        mid = (lo + hi) // 2
        counts = before(mid)
        if sum(counts) <= amount:
            lo, lo_counts = mid, counts
        else:
            hi, hi_counts = mid, counts
    near = water_fill(
        amount - sum(lo_counts), [h - low for h, low in zip(hi_counts, lo_counts, strict=True)]
    )
    return {k: low + n for k, low, n in zip(keys, lo_counts, near, strict=True)}
