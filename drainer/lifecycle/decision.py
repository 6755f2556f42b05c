"""What a run does first, decided from plain values: the one branch point of `drain_once`.

Under the drain's lease a run finds at most one open (uncommitted) plan and, when it carries a
launch key, the run that key names. From these alone it

- reports the run that already drained its launch (nothing new is drained),
- resumes the open plan when it is this call's run (same levels, no other launch's key),
- finishes an open plan of other levels or another launch first, then plans its own levels,
- or plans anew.

Pure: the I/O that gathers the inputs and acts on the verdict stays in `drainer.lifecycle.run`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Step(enum.Enum):
    REPORT = "report"  # an earlier launch with this key drained the levels: report its run
    RESUME = "resume"  # the open plan is this call's run: execute it again, same ranges
    FINISH_FIRST = "finish_first"  # the open plan is not this call's: finish it, then plan
    PLAN = "plan"  # nothing is open: plan the requested levels


@dataclass(frozen=True)
class OpenPlan:
    """The drain's uncommitted plan: its run id, levels and launch key (if it has one)."""

    run_id: int
    levels: list[int]
    launch_key: str | None = None


@dataclass(frozen=True)
class LaunchRun:
    """The run that carries this call's launch key, and that run's status."""

    run_id: int
    status: str


@dataclass(frozen=True)
class Verdict:
    step: Step
    # the run reported (REPORT), resumed (RESUME) or finished first (FINISH_FIRST)
    run_id: int | None = None
    # record this call's launch key on the run it resumes or plans
    claim_launch: bool = False


def decide(
    levels: list[int],
    launch_key: str | None,
    open_plan: OpenPlan | None,
    launch_run: LaunchRun | None,
) -> Verdict:
    """The verdict for a call that asks for `levels` (sorted) under `launch_key`.

    A launch whose run is not committed yet has nothing to report: that run is the open plan,
    resumed or finished like any other. An open plan is resumed only when it covers exactly
    the requested levels and names no other launch; otherwise it would be replaced, and an
    uncommitted plan is never replaced (a crash must leave the same ranges to re-execute).
    """
    if launch_run is not None and launch_run.status == "committed":
        return Verdict(Step.REPORT, launch_run.run_id)
    if open_plan is None:
        return Verdict(Step.PLAN, claim_launch=launch_key is not None)
    if open_plan.levels != levels or open_plan.launch_key not in (None, launch_key):
        return Verdict(Step.FINISH_FIRST, open_plan.run_id, claim_launch=launch_key is not None)
    return Verdict(
        Step.RESUME,
        open_plan.run_id,
        claim_launch=launch_key is not None and open_plan.launch_key is None,
    )
