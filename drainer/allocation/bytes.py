"""Byte budgets (`budget_bytes`): a run also stops at a number of key+value+header bytes.

Records are not all alike: a level of 1 MB records must not fill a run meant for 100-byte ones.
The byte budget is shared over the levels in proportion to their reserved shares of the record
budget; a level may read as many records as its share holds at the size of its largest records
(its partitions' average record sizes, from recent runs or a sample), and what the levels with
small records leave is offered to the byte-limited ones, highest level first. The record rules
then plan within those caps, so the plan keeps its priorities in records and fits in bytes.

Every level with a backlog may read at least one record, so no level starves on a record larger
than its share: only then can a plan exceed `budget_bytes`, by less than one record per level.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from drainer.allocation.fill import key_of
from drainer.allocation.types import PartitionBacklog


def check_byte_budget(
    budget_bytes: int | None, record_bytes: Mapping[tuple[int, int], float] | None
) -> None:
    if budget_bytes is not None and (
        isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0
    ):
        raise ValueError(
            f"budget_bytes is {budget_bytes!r}: set a size > 0, e.g. 100KB, 512MiB or 1GB"
        )
    for key, size in (record_bytes or {}).items():
        if not size >= 0:
            raise ValueError(f"record size of (level, partition) {key} is {size!r}: use >= 0 bytes")


def level_record_size(
    members: list[PartitionBacklog], record_bytes: Mapping[tuple[int, int], float]
) -> dict[int, float]:
    """Per level, the largest average record size among its partitions with a backlog.

    A partition of unknown size counts as the largest size known in the drain (the estimate
    errs on the side of the budget); a level none of whose sizes is known gets that too.
    """
    known = [record_bytes[key_of(p)] for p in members if key_of(p) in record_bytes]
    fallback = max(known, default=0.0)
    sizes: dict[int, float] = {}
    for p in members:
        if p.backlog:
            size = record_bytes.get(key_of(p), fallback)
            sizes[p.level] = max(sizes.get(p.level, 0.0), size)
    return sizes


def byte_caps(
    reserved: Mapping[int, int],
    backlog: Mapping[int, int],
    sizes: Mapping[int, float],
    budget_bytes: int,
) -> dict[int, int]:
    """Records each level may read: its share of `budget_bytes` at its record size.

    A level's share is `budget_bytes * reserved / sum(reserved)`; what a level cannot use (its
    backlog is smaller) is offered to the others, highest level first. Each cap is at least 1
    for a level with a backlog, and at most its backlog.
    """
    total = sum(reserved.values()) or 1
    exact = {level: Fraction(size) for level, size in sizes.items()}  # no rounding drift
    caps: dict[int, int] = {}
    for level, share in reserved.items():
        allowance = Fraction(budget_bytes * share, total)
        size = exact.get(level, Fraction(0))
        wanted = backlog.get(level, 0)
        caps[level] = wanted if size <= 0 or wanted * size <= allowance else int(allowance // size)
    spare = budget_bytes - sum(caps[level] * exact.get(level, Fraction(0)) for level in caps)
    for level in sorted(reserved, reverse=True):
        size = exact.get(level, Fraction(0))
        if size > 0 and caps[level] < backlog.get(level, 0):
            more = min(int(spare // size), backlog[level] - caps[level])
            caps[level] += more
            spare -= more * size
    return {level: max(cap, 1) if backlog.get(level, 0) else 0 for level, cap in caps.items()}


def planned_bytes(
    reads: Mapping[tuple[int, int], int], record_bytes: Mapping[tuple[int, int], float]
) -> dict[int, int]:
    """Per level, the estimated key+value+header bytes of `reads` (records per (level, partition))."""
    fallback = max(record_bytes.values(), default=0.0)
    total: dict[int, float] = {}
    for (level, partition), count in reads.items():
        size = record_bytes.get((level, partition), fallback)
        total[level] = total.get(level, 0.0) + count * size
    return {level: round(value) for level, value in total.items()}
