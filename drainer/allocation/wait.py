"""Maximum wait (`max_wait`): records older than their level's limit are served first.

A partition's late records are its pending ones with a timestamp before `now - max_wait`; since a
run reads each partition from its committed offset, they are the first ones it reads. Before any
burst, each level is granted enough of the budget to read its late records, highest level first
when they exceed the budget; the grant counts first against the level's own reserved share, and
what it needs beyond that comes out of the other levels' shares, first what they cannot use, then
the lowest level's first. The rest of the budget is shared by the usual rules.
"""

from __future__ import annotations

from collections.abc import Mapping

from drainer.allocation.fill import key_of
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
