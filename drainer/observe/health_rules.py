"""A level's health in time, not records: oldest record's age, arrival and drain rates, an ETA to
empty, and a state by Burrow's rules (OK, WARN, STALL, STOP).

Pure: the caller loads the level's recent committed runs and its backlog now, this module turns
them into numbers people plan with ("when will level 1 be empty?"). Burrow judges a consumer
group over a sliding window of its commits; a drain's commits are its runs, so the window is the
drain's recent committed runs that covered the level (backfills of other levels say nothing
about it).

- STOP: records are waiting and no run has drained the level in the window (never, or the last
  run is long past the drain's usual interval): nothing is running. A drain without a schedule
  has no usual interval (it runs when someone runs it): it is judged by its own `max_wait`
  instead, STOP once its oldest waiting record is older than that.
- STALL: runs happen, but the level's committed offset has not moved in any of them while it
  had backlog.
- WARN: the level progresses but is throttled: each run drained less than its backlog and the
  backlog has not shrunk over the window.
- OK: otherwise (empty, or shrinking).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import median


class Health(StrEnum):
    OK = "OK"
    WARN = "WARN"
    STALL = "STALL"
    STOP = "STOP"


@dataclass(frozen=True)
class RunSample:
    """One committed run as one level saw it."""

    committed_at: float  # seconds since the epoch
    backlog_before: int
    drained: int
    backlog_after: int


@dataclass(frozen=True)
class LevelHealth:
    level: int
    backlog: int
    oldest_age_s: float | None  # age of the oldest waiting record; None when nothing waits
    arrival_rate: float | None  # records/s arriving since the window's first run
    drain_rate: float | None  # records/s the runs removed; None without two runs
    eta_s: float | None  # seconds to empty; None when growing or unknown
    growing: bool  # throttled runs and arrivals at least as fast as the drain: no ETA
    state: Health
    reason: str
    keeping_up: bool = False  # the last run drained all it found: the next one empties the level
    eta_note: str | None = None  # why there is no ETA, when there is a reason to say

    def eta_text(self) -> str:
        if self.backlog == 0:
            return "empty"
        if self.growing:
            return "growing"
        if self.eta_s is None:
            return self.eta_note or "unknown"
        return format_seconds(self.eta_s)


STALE_INTERVALS = 3.0
"""A level whose last run is older than this many of its usual intervals between runs counts
as stopped (Burrow's STOP: the consumer stopped committing)."""

RATE_WINDOW_S = 60.0
"""Arrivals are measured since the newest run at least this old: recent enough that a burst
the earlier runs drained does not count as arriving still, long enough to be a rate."""


def level_health(
    level: int,
    samples: Sequence[RunSample],
    backlog: int,
    now: float,
    oldest_timestamp: float | None = None,
    scheduled: bool = True,
    max_wait_s: float | None = None,
) -> LevelHealth:
    """The level's rates, ETA and state from its recent runs (any order) and its backlog now.

    `scheduled`: the drain has a schedule, so its runs have a rhythm to judge by; without one
    the level is judged by its `max_wait_s` (None: no wait promised) and its ETA is the next
    run, whenever someone starts it.

    Two regimes decide the ETA. A level whose last run drained everything it found is supply
    bound: its drain rate only mirrors the arrivals, and the next run empties it, so the ETA is
    the time left to that run. A throttled level (its last run left records behind) drains at
    its capacity: the ETA is backlog / (drain rate - arrival rate), or "growing" when the
    arrivals keep pace. A stopped level (STOP) has no ETA: no run is coming.
    """
    runs = sorted(samples, key=lambda s: s.committed_at)
    oldest_age = (
        None if backlog == 0 or oldest_timestamp is None else max(0.0, now - oldest_timestamp)
    )
    arrival, drain = _rates(runs, backlog, now)
    usual = _usual_interval(runs) if scheduled else None
    keeping_up = bool(runs) and runs[-1].drained >= runs[-1].backlog_before
    growing = False
    eta: float | None = None
    note = None
    if backlog == 0:
        eta = 0.0
    elif keeping_up and not scheduled:
        note = "at the next run (no schedule)"
    elif keeping_up:
        eta = None if usual is None else max(0.0, usual - (now - runs[-1].committed_at))
    elif arrival is not None and drain is not None:
        growing = arrival > 0 and arrival >= drain
        eta = None if growing or drain <= arrival else backlog / (drain - arrival)
    if eta is None and note is None and len(runs) < 2:
        note = f"too little history ({len(runs)} run{'' if len(runs) == 1 else 's'}; 2 needed)"
    if scheduled:
        state, reason = _state(runs, backlog, now, usual)
    else:
        state, reason = _unscheduled_state(runs, backlog, now, oldest_age, max_wait_s)
    if state is Health.STOP:
        eta, note = None, None  # the rates describe runs that no longer come: no time to empty
    return LevelHealth(
        level, backlog, oldest_age, arrival, drain, eta, growing, state, reason, keeping_up, note
    )


def _rates(runs: list[RunSample], backlog: int, now: float) -> tuple[float | None, float | None]:
    """Arrivals per second over the last RATE_WINDOW_S or more; drains per second between the
    window's runs.

    Arrivals are what the backlog would have grown by without the runs: its change since the
    run they are measured from plus what the later runs drained. The drain rate counts only the time the runs
    span: records arriving after the last run wait for the next one, which has not happened
    yet, so counting that idle time would understate the drain (and call a level that keeps
    up "growing").
    """
    if not runs:
        return None, None
    # from the newest run at least RATE_WINDOW_S old (else the oldest): a burst that earlier
    # runs drained is over, and must not read as records still arriving
    old_enough = [i for i, s in enumerate(runs) if now - s.committed_at >= RATE_WINDOW_S]
    start = old_enough[-1] if old_enough else 0
    since = sum(s.drained for s in runs[start + 1 :])
    span = now - runs[start].committed_at
    arrival = None if span <= 0 else max(0.0, (backlog - runs[start].backlog_after + since) / span)
    drained = sum(s.drained for s in runs[1:])
    covered = runs[-1].committed_at - runs[0].committed_at
    return arrival, (drained / covered if covered > 0 else None)


def _usual_interval(runs: list[RunSample]) -> float | None:
    """The median time between the window's runs: the drain's rhythm, whatever schedules it."""
    gaps = [b.committed_at - a.committed_at for a, b in zip(runs, runs[1:], strict=False)]
    return median(gaps) if gaps and median(gaps) > 0 else None


def _state(
    runs: list[RunSample], backlog: int, now: float, usual: float | None
) -> tuple[Health, str]:
    if not runs:
        if backlog > 0:
            return Health.STOP, "records are waiting and no run has drained this level yet"
        return Health.OK, "nothing to drain"
    idle = now - runs[-1].committed_at
    if backlog > 0 and usual is not None and idle > STALE_INTERVALS * usual:
        return (
            Health.STOP,
            f"records are waiting and the last run was {format_seconds(idle)} ago, "
            f"more than {STALE_INTERVALS:g} times the usual {format_seconds(usual)} between runs",
        )
    waiting = [s for s in runs if s.backlog_before > 0]
    if backlog > 0 and waiting and len(waiting) == len(runs) and all(s.drained == 0 for s in runs):
        return (
            Health.STALL,
            f"the committed offset has not moved in the last {len(runs)} runs "
            "while records were waiting",
        )
    throttled = all(0 < s.drained < s.backlog_before for s in runs[-2:])
    if backlog > 0 and len(runs) >= 2 and throttled and backlog >= runs[0].backlog_after:
        return (
            Health.WARN,
            "progressing but throttled: each run drained less than the backlog and the backlog "
            f"has not shrunk over the last {len(runs)} runs",
        )
    return Health.OK, "draining" if backlog > 0 else "empty"


def _unscheduled_state(
    runs: list[RunSample],
    backlog: int,
    now: float,
    oldest_age: float | None,
    max_wait_s: float | None,
) -> tuple[Health, str]:
    """A drain run by hand: STOP only once a waiting record is older than the level's own
    `max_wait`; the progress rules (STALL, WARN) as for any drain."""
    late = max_wait_s is not None and oldest_age is not None and oldest_age > max_wait_s
    if backlog > 0 and late:
        assert oldest_age is not None and max_wait_s is not None
        return (
            Health.STOP,
            f"records have waited {format_seconds(oldest_age)}, past the level's max_wait "
            f"of {format_seconds(max_wait_s)}, and the drain has no schedule: run it",
        )
    if not runs:
        if backlog > 0:
            return Health.OK, "records wait for a run (the drain has no schedule)"
        return Health.OK, "nothing to drain"
    state, reason = _state(runs, backlog, now, None)
    if state is Health.OK and backlog > 0:
        return state, "records wait for the next run (the drain has no schedule)"
    return state, reason


def format_seconds(seconds: float) -> str:
    """`42 s`, `7 min`, `3.5 h`, `2.1 d`: how long, at the precision people plan with."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
