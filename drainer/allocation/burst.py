"""Burst from history: the one level that may take what the others left unused.

A level is eligible when it drained at least its reserved share in `maxout_threshold` of its
last `window` runs; the highest eligible level bursts. `burst_eligible` is the one definition
of eligibility, used by planning and by `drainer status` alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


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

    The one definition of eligibility: planning (`history_burst`) and `drainer status` use it.
    """
    check_window(window, maxout_threshold)
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
    burster, lendable = history_burst(reserved, history, window, maxout_threshold)
    allocation = dict(sorted(reserved.items()))
    if burster is None:
        return allocation
    for level, unused in lendable.items():
        allocation[level] -= unused
        allocation[burster] += unused
    return allocation


def history_burst(
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


def check_window(window: int, maxout_threshold: int) -> None:
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
