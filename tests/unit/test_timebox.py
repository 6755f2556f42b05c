"""Time-boxed runs: a budget from measured throughput (drainer.allocation.timebox)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drainer.allocation.timebox import RunThroughput, timeboxed_budget


def test_first_runs_use_the_configured_budget():
    box = timeboxed_budget(240, cap=70_000, recent=[])
    assert box.budget == 70_000 and box.records_per_s is None


def test_budget_fits_the_slot_at_the_measured_rate():
    recent = [RunThroughput(10_000, 10.0, 1_000_000), RunThroughput(30_000, 20.0, 3_000_000)]
    box = timeboxed_budget(60, cap=1_000_000, recent=recent)
    assert box.records_per_s == (1_000 + 1_500) / 2  # the median of the runs' rates
    assert box.budget == int(1_250 * 60)
    assert box.byte_budget == int((100_000 + 150_000) / 2 * 60)


def test_one_run_much_larger_than_the_slot_does_not_set_the_rate():
    """The first run of a drain uses the cap: 400,000 records whose fixed cost is spread thin
    (21,000/s). Runs the size of the slot drain 8,000/s; the median follows them, where the
    pooled rate (648,000 / 50.8 s = 12,800/s) would plan 128,000 records, 1.6 slots."""
    recent = [
        RunThroughput(400_000, 19.1),
        RunThroughput(95_000, 11.7),
        RunThroughput(79_000, 10.3),
        RunThroughput(74_000, 9.7),
    ]
    box = timeboxed_budget(10, cap=400_000, recent=recent)
    assert 7_600 <= box.records_per_s <= 8_200
    assert box.budget <= 82_000


def test_budget_stays_capped():
    box = timeboxed_budget(600, cap=5_000, recent=[RunThroughput(10_000, 1.0)])
    assert box.budget == 5_000 and "capped" in box.reason


def test_an_overshooting_run_lowers_the_next_estimate():
    steady = [RunThroughput(1_000, 1.0)] * 4
    before = timeboxed_budget(60, cap=10**9, recent=steady)
    after = timeboxed_budget(60, cap=10**9, recent=[*steady, RunThroughput(60_000, 90.0)])
    assert after.budget < before.budget
    # the overshoot factor applies on top of the slow run's own rate
    assert after.records_per_s <= 60_000 / 90 * 60 / 90
    assert "lowered" in after.reason


def test_a_slot_too_short_still_gets_the_minimum():
    box = timeboxed_budget(1, cap=10_000, recent=[RunThroughput(1, 100.0)], minimum=7)
    assert box.budget == 7


@given(
    st.lists(
        st.builds(RunThroughput, st.integers(0, 10**7), st.floats(0, 3600), st.none()),
        max_size=10,
    ),
    st.floats(1, 3600),
    st.integers(7, 10**7),
)
def test_budget_always_between_minimum_and_cap(recent, run_seconds, cap):
    box = timeboxed_budget(run_seconds, cap=cap, recent=recent, minimum=7)
    assert 7 <= box.budget <= cap


def _simulate(run_seconds: float, overhead: float, rate: float, cap: int, runs: int) -> list:
    """Budgets and slot times of `runs` time-boxed runs of a drain whose run of B records
    takes `overhead + B / rate` seconds (the whole slot, as `runs.slot_s` measures it)."""
    history: list[RunThroughput] = []
    for _ in range(runs):
        budget = timeboxed_budget(run_seconds, cap=cap, recent=history).budget
        history.append(RunThroughput(budget, overhead + budget / rate))
    return history


@given(st.floats(0.5, 8.0), st.floats(200, 50_000))
def test_with_a_fixed_cost_per_run_the_budget_converges_to_the_one_that_fills_the_slot(
    overhead, rate
):
    """A fixed per-run cost (Spark start, commit, mirror) is in the slot's time, so one rate
    over the whole slot converges to the budget `rate * (T - overhead)` that fills it. Fails if
    the rate were measured before the commit (the overhead missing from the seconds: every
    run would overshoot by the missing part) or if an overshoot were not corrected."""
    slot = 10.0
    history = _simulate(slot, overhead, rate, cap=10**8, runs=30)
    assert history[0].records == 10**8  # the first run has no history: the cap
    assert history[1].seconds <= slot  # the first run's overshoot is corrected at once
    exact = rate * (slot - overhead)
    for run in history[-5:]:
        assert abs(run.records - exact) <= 0.02 * exact + 1
        assert run.seconds <= slot * 1.02


def test_runs_held_back_by_failing_records_do_not_collapse_the_budget():
    """The observed loop (issue 31): runs that drained 1 to 4 records, the rest held back
    behind failing ones, counted as throughput; with 3,000 records waiting the next budget was
    87 of 1,500 and took 3 to 4 runs to recover, while real throughput was ~1,000 records/s.
    Before: the first budget after the small runs was below 200."""
    cap, slot = 1_500, 60.0

    def seconds(records: int) -> float:
        return 0.9 + records / 1_000  # a run's fixed cost, then ~1,000 records/s

    history = [RunThroughput(cap, seconds(cap), None, cap) for _ in range(5)]
    history += [RunThroughput(n, seconds(n), None, cap) for n in (1, 4, 2, 3, 1)]
    waiting = 3_000
    budgets = []
    for _ in range(4):  # the failing records were fixed: the next runs have 3,000 waiting
        budget = timeboxed_budget(slot, cap=cap, recent=history).budget
        budgets.append(budget)
        drained = min(budget, waiting)
        history.append(RunThroughput(drained, seconds(drained), None, budget))
    assert budgets == [cap] * 4


@given(
    st.lists(st.integers(1, 10_000), min_size=1, max_size=5),
    st.lists(st.integers(1, 99), min_size=1, max_size=15),
)
def test_runs_smaller_than_their_budget_that_fit_the_slot_never_lower_it(full, small):
    """Only runs that drained their whole budget measure throughput: runs cut short by the
    backlog (or held-back records) that still fit their slot leave the budget as it was."""
    slot = 30.0
    measured = [RunThroughput(n, 0.5 + n / 2_000, None, n) for n in full]
    before = timeboxed_budget(slot, cap=10**6, recent=measured).budget
    limited = [RunThroughput(n, 0.5 + n / 2_000, None, 100) for n in small]
    assert timeboxed_budget(slot, cap=10**6, recent=[*measured, *limited]).budget == before


def test_a_limited_run_that_overshot_its_slot_still_lowers_the_budget():
    box = timeboxed_budget(10, cap=10_000, recent=[RunThroughput(50, 20.0, None, 500)])
    assert box.budget == 12  # 2.5 records/s, halved for taking twice the slot
