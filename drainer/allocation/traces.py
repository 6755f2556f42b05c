"""Arrival traces for the policy simulator (drainer.allocation.simulate): built-in shapes
scaled to a drain's capacity, or a CSV of arrivals per minute and level."""

from __future__ import annotations

import csv
import io
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the simulator imports this module
    from drainer.allocation.simulate import Drain

Trace = list[list[int]]
"""Arrivals: `trace[minute][level]` records arrive in that minute."""


def builtin_trace(name: str, drain: Drain, interval_min: int = 5) -> Trace:
    """`steady`, `top-burst`, `bottom-flood` or `diurnal`, scaled to the drain's capacity
    (one budget per interval): steady is 80% of it, spread evenly over the levels."""
    capacity = drain.budget / interval_min  # records a minute
    n = drain.levels

    def even(load: float) -> list[int]:
        return [round(load * capacity / n)] * n

    if name == "steady":
        return [even(0.8) for _ in range(240)]
    if name == "top-burst":  # 30 minutes of 2x capacity on the top level, over a 50% base
        return [
            [*even(0.5)[:-1], even(0.5)[-1] + (round(2 * capacity) if 60 <= m < 90 else 0)]
            for m in range(240)
        ]
    if name == "bottom-flood":  # 30 minutes of 4x capacity on level 0, over a 50% base
        return [
            [even(0.5)[0] + (round(4 * capacity) if 30 <= m < 60 else 0), *even(0.5)[1:]]
            for m in range(240)
        ]
    if name == "diurnal":  # a day between 20% and 110% of capacity
        return [even(0.65 + 0.45 * math.sin(2 * math.pi * m / 1440)) for m in range(1440)]
    raise ValueError(
        f"trace {name!r} is unknown: use one of {', '.join(TRACES)} or a CSV file path"
    )


TRACES = ("steady", "top-burst", "bottom-flood", "diurnal")


def parse_trace(text: str, levels: int, source: str = "trace") -> Trace:
    """A CSV with a header `minute,0,1,...` (one column per level) and arrival counts per row;
    minutes missing from the file have no arrivals. `source` names the file in errors."""
    rows = list(csv.DictReader(io.StringIO(text)))
    path = source
    if not rows or "minute" not in rows[0]:
        raise ValueError(
            f"{path}: expected a CSV header `minute,0,1,...` with one column per level"
        )
    trace: Trace = []
    for n, row in enumerate(rows, start=2):
        try:
            minute = int(row["minute"])
            counts = [int(row.get(str(level)) or 0) for level in range(levels)]
        except ValueError:
            raise ValueError(f"{path}:{n}: minute and counts must be whole numbers") from None
        if minute < 0 or min(counts) < 0:
            raise ValueError(f"{path}:{n}: minute and counts must be >= 0")
        while len(trace) <= minute:
            trace.append([0] * levels)
        trace[minute] = [a + b for a, b in zip(trace[minute], counts, strict=True)]
    return trace
