"""Every case of the run's first decision (drainer.lifecycle.decision), as one table."""

from __future__ import annotations

import pytest

from drainer.lifecycle.decision import LaunchRun, OpenPlan, Step, Verdict, decide

LEVELS = [0, 1, 2]

CASES = [
    # id, requested levels, launch key, open plan, launch's run, expected verdict
    ("no open plan", LEVELS, None, None, None, Verdict(Step.PLAN)),
    ("no open plan, with a key", LEVELS, "k", None, None, Verdict(Step.PLAN, claim_launch=True)),
    (
        "open plan, same levels, no keys",
        LEVELS,
        None,
        OpenPlan(7, LEVELS),
        None,
        Verdict(Step.RESUME, 7),
    ),
    (
        "open plan without key, same levels, call with a key: resumed and claimed",
        LEVELS,
        "k",
        OpenPlan(7, LEVELS),
        None,
        Verdict(Step.RESUME, 7, claim_launch=True),
    ),
    (
        "open plan, same levels, same key (a crashed launch)",
        LEVELS,
        "k",
        OpenPlan(7, LEVELS, "k"),
        LaunchRun(7, "failed"),
        Verdict(Step.RESUME, 7),
    ),
    (
        "open plan, same levels, other launch's key",
        LEVELS,
        "k",
        OpenPlan(7, LEVELS, "other"),
        None,
        Verdict(Step.FINISH_FIRST, 7, claim_launch=True),
    ),
    (
        "open plan of a launch, same levels, call without a key",
        LEVELS,
        None,
        OpenPlan(7, LEVELS, "other"),
        None,
        Verdict(Step.FINISH_FIRST, 7),
    ),
    (
        "open plan, other levels",
        LEVELS,
        None,
        OpenPlan(7, [1]),
        None,
        Verdict(Step.FINISH_FIRST, 7),
    ),
    (
        "open plan, more levels than requested",
        [1],
        None,
        OpenPlan(7, LEVELS),
        None,
        Verdict(Step.FINISH_FIRST, 7),
    ),
    (
        "open plan, other levels, call with a key",
        LEVELS,
        "k",
        OpenPlan(7, [2]),
        None,
        Verdict(Step.FINISH_FIRST, 7, claim_launch=True),
    ),
    (
        "launch already committed, no open plan",
        LEVELS,
        "k",
        None,
        LaunchRun(5, "committed"),
        Verdict(Step.REPORT, 5),
    ),
    (
        "launch already committed, another plan open: left for a later run",
        LEVELS,
        "k",
        OpenPlan(7, [1], "other"),
        LaunchRun(5, "committed"),
        Verdict(Step.REPORT, 5),
    ),
    (
        "launch already committed, open plan of the same levels",
        LEVELS,
        "k",
        OpenPlan(7, LEVELS),
        LaunchRun(5, "committed"),
        Verdict(Step.REPORT, 5),
    ),
    (
        "launch claimed by an uncommitted run (running when its process died)",
        LEVELS,
        "k",
        OpenPlan(7, LEVELS, "k"),
        LaunchRun(7, "running"),
        Verdict(Step.RESUME, 7),
    ),
    (
        "launch claimed by an uncommitted run of other levels",
        LEVELS,
        "k",
        OpenPlan(7, [0], "k"),
        LaunchRun(7, "planned"),
        Verdict(Step.FINISH_FIRST, 7, claim_launch=True),
    ),
    (
        "launch's run was abandoned: planned anew",
        LEVELS,
        "k",
        None,
        LaunchRun(5, "abandoned"),
        Verdict(Step.PLAN, claim_launch=True),
    ),
]


@pytest.mark.parametrize(
    ("levels", "launch_key", "open_plan", "launch_run", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_decide(levels, launch_key, open_plan, launch_run, expected):
    assert decide(levels, launch_key, open_plan, launch_run) == expected


def test_every_step_is_in_the_table():
    """The table lists every verdict the function can give (and so every branch)."""
    assert {case[-1].step for case in CASES} == set(Step)
