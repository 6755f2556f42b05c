"""A drain's `max_wait` as Dagster's freshness policy, evaluated by Dagster's freshness daemon.

Dagster's time-window policy asks "was the asset materialized within the window?"; a drain whose
runs are further apart than its strictest `max_wait` cannot keep records within it, whatever
its budget. So the strictest level's wait is the fail window and half of it the warn window.
Whether a run kept every record within its wait is per level, in the asset checks
(`lag_within_sla`, `level_health`): the policy says the drain runs often enough, the checks
say the runs keep up (docs/dagster.md, "Freshness").
"""

from __future__ import annotations

from datetime import timedelta

import dagster as dg

from drainer.config import DrainConfig

# Dagster refuses shorter windows ("system constraints"): a shorter max_wait fails after a minute
SHORTEST_WINDOW = timedelta(minutes=1)


def drain_freshness(drain: DrainConfig) -> dg.FreshnessPolicy | None:
    """The time-window policy of a drain with `max_wait` (None without one)."""
    waits = drain.max_wait_ms
    if not waits:
        return None
    fail = max(timedelta(milliseconds=min(waits.values())), SHORTEST_WINDOW)
    warn = max(fail / 2, SHORTEST_WINDOW)
    return dg.FreshnessPolicy.time_window(
        fail_window=fail, warn_window=warn if warn < fail else None
    )
