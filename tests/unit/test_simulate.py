"""The policy simulator: every record is accounted for, and the policies keep their promises."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drainer.allocation.simulate import (
    POLICIES,
    Drain,
    Throughput,
    compare,
    simulate,
)
from drainer.allocation.traces import TRACES, builtin_trace, parse_trace

DRAIN = Drain(levels=3, budget=70, max_wait_ms={0: 20 * 60_000, 1: 20 * 60_000, 2: 20 * 60_000})
TRACE = st.lists(st.lists(st.integers(0, 40), min_size=3, max_size=3), min_size=1, max_size=60)
BUDGETS = {  # the drain's budgets: records only, time-boxed, and with a byte budget
    "budget": DRAIN,
    "run_seconds": replace(DRAIN, run_seconds=21.5),  # a full run of 70 takes 22.1 s
    "budget_bytes": replace(DRAIN, budget_bytes=30_000),
}
SIZES = Throughput(record_bytes=(3000.0, 500.0, 100.0))  # level 0's records are the large ones


@settings(max_examples=60, deadline=None)
@given(TRACE, st.sampled_from(sorted(POLICIES)), st.sampled_from(sorted(BUDGETS)))
def test_every_arrival_is_drained_once(trace: list[list[int]], policy: str, mode: str) -> None:
    result = simulate(BUDGETS[mode], trace, policy, interval_min=5, throughput=SIZES)
    assert result.runs_to_empty is not None
    for level in result.levels:
        assert level.records == sum(minute[level.level] for minute in trace)
        assert 0 <= level.p50_wait_min <= level.p99_wait_min <= level.max_wait_min
    assert 0 <= result.run_p50_s <= result.run_max_s


@settings(max_examples=60, deadline=None)
@given(TRACE, st.sampled_from(sorted(BUDGETS)))
def test_backlog_aware_policies_use_the_whole_budget_whenever_the_backlog_covers_it(
    trace: list[list[int]], mode: str
) -> None:
    # with budget_bytes a run is also full when no waiting record fits in the bytes it left
    names = ["strict", "drainer", "drainer+max_wait"]
    results = {r.policy: r for r in compare(BUDGETS[mode], trace, policies=names, throughput=SIZES)}
    for name in names:
        assert results[name].utilization == 1.0, name
    if mode != "budget_bytes":  # a byte cap may hold a higher level while a lower one reads
        assert results["strict"].inversions == results["drainer"].inversions == 0


@st.composite
def below_capacity(draw: st.DrawFn) -> tuple[list[list[int]], int, dict[int, int], bool]:
    """Random per-level arrivals whose total per run interval stays below the budget (with
    `spill`: below twice the budget over any two consecutive intervals, so a burst may carry
    over into the next run); an interval of 1-10 minutes and a random max_wait of at least 2
    intervals on a random non-empty set of levels."""
    interval = draw(st.integers(1, 10))
    spill = draw(st.booleans())
    windows = draw(st.integers(1, 12))
    budget = DRAIN.budget
    trace: list[list[int]] = [[0, 0, 0]]  # minute 0 is the first run's; then one per interval
    before = 0  # what the previous interval brought
    for _ in range(windows):
        cells = draw(
            st.lists(
                st.lists(st.integers(0, budget), min_size=3, max_size=3),
                min_size=interval,
                max_size=interval,
            )
        )
        room = (2 * (budget - 1) - before) if spill else budget - 1
        total = sum(map(sum, cells))
        if total > room:  # scale down to the room left (rounding down keeps it below)
            cells = [[n * room // total for n in minute] for minute in cells]
        before = sum(map(sum, cells))
        trace.extend(cells)
    levels = draw(st.sets(st.integers(0, 2), min_size=1))
    limits = {lvl: draw(st.integers(2 * interval, 6 * interval)) * 60_000 for lvl in levels}
    return trace, interval, limits, spill


@settings(max_examples=100, deadline=None)
@given(below_capacity())
def test_below_capacity_max_wait_holds_and_the_top_level_keeps_strict_latency(
    case: tuple[list[list[int]], int, dict[int, int], bool],
) -> None:
    """The issue's aim below capacity: with max_wait no record waits past it, and the top
    level's p99 wait is within one run interval of strict priority's. Fails if the policy left
    records behind under capacity, or if its shares held the top level back more than a run."""
    trace, interval, limits, _ = case
    drain = replace(DRAIN, max_wait_ms=limits)
    assert _misses_the_aim(drain, trace, interval, "drainer+max_wait") == []


def _misses_the_aim(drain: Drain, trace: list[list[int]], interval: int, policy: str) -> list[str]:
    """How `policy` misses the issue's below-capacity aim on `trace`: records past max_wait
    (waits measured to the commit), or a top-level p99 more than an interval over strict's."""
    strict, result = compare(drain, trace, interval, policies=["strict", policy])
    assert result.run_max_s < 60  # runs of at most 70 records: the clock is the interval's
    missed = [
        f"level {lv.level}: {lv.over_max_wait} past" for lv in result.levels if lv.over_max_wait
    ]
    if result.levels[0].p99_wait_min > strict.levels[0].p99_wait_min + interval:
        missed.append(f"top p99 {result.levels[0].p99_wait_min} vs {strict.levels[0].p99_wait_min}")
    return missed


def test_the_below_capacity_aim_can_be_missed_by_a_policy_that_holds_levels_to_their_shares() -> (
    None
):
    """The property's check is not vacuous: 21 records on level 0 (reserved 10 of 70), a run a
    minute, max_wait 2 min. The seed policy (no backlog awareness) drains 10, 10, 1 and its
    last record waits past 2 min; drainer's drains all 21 in the first run."""
    trace, drain = [[0, 0, 0], [21, 0, 0]], replace(DRAIN, max_wait_ms={0: 2 * 60_000})
    assert _misses_the_aim(drain, trace, 1, "seed") == ["level 0: 1 past"]
    assert _misses_the_aim(drain, trace, 1, "drainer+max_wait") == []


def test_max_wait_of_the_lowest_level_bounds_its_wait_through_a_top_level_burst() -> None:
    """Level 0 gets 3 records a minute (15 a run, above its reserved 10), level 2 gets 10 a
    minute and 30 a minute for an hour (above capacity). Without max_wait level 0 queues behind
    level 2's backlog for as long as it lasts; with `max_wait: {0: 20m}` it waits about that."""
    trace = [[3, 0, 30 if 60 <= m < 120 else 10] for m in range(360)]
    drain = Drain(levels=3, budget=70, max_wait_ms={0: 20 * 60_000})
    plain, bounded = compare(drain, trace, policies=["drainer", "drainer+max_wait"])
    assert plain.levels[-1].max_wait_min > 60
    # its limit, plus a run interval (it is judged when the run is planned), plus the run
    assert bounded.run_max_s < 30
    assert bounded.levels[-1].max_wait_min <= 20 + 5 + 0.5
    assert bounded.levels[-1].over_max_wait <= plain.levels[-1].over_max_wait
    assert plain.utilization == bounded.utilization == 1.0


def test_time_boxed_runs_fit_their_slot_from_the_simulated_throughput() -> None:
    """At 2 records/s a full run of 70 takes 55.7 s; with `run_seconds: 40` the budget comes
    from the measured throughput (timebox.py), (40 - 20 s fixed) / 0.51 s a record = 39 at
    most, and no run overshoots. Fails if the simulator did not feed timebox.py its runs."""
    trace = [[5, 5, 5] for _ in range(120)]  # 75 records a run: more than a slot holds
    slow = Throughput(records_per_s=2.0)
    (fixed,) = compare(DRAIN, trace, policies=["drainer"], throughput=slow)
    (boxed,) = compare(
        replace(DRAIN, run_seconds=40.0), trace, policies=["drainer"], throughput=slow
    )
    assert fixed.budget_p50 == 70 and fixed.run_max_s == 55.7
    assert 35 <= boxed.budget_p50 <= 39 and boxed.run_max_s <= 40
    assert boxed.over_run_seconds == 0 and boxed.utilization == 1.0
    assert boxed.runs_to_empty is not None and fixed.runs_to_empty is not None
    assert boxed.runs_to_empty > fixed.runs_to_empty  # the slot costs capacity


def test_a_byte_budget_holds_back_the_level_of_large_records_only() -> None:
    """Level 0's records are 3,000 bytes, level 2's 100: a byte budget of 30,000 a run holds
    level 0 (25 records a run of it alone are 75,000 bytes), not level 2."""
    trace = [[5, 5, 5] for _ in range(120)]
    records, in_bytes = (
        compare(drain, trace, policies=["drainer"], throughput=SIZES)[0]
        for drain in (DRAIN, BUDGETS["budget_bytes"])
    )
    # level 2 waits as long, but for its runs' time (they read fewer bytes)
    assert in_bytes.levels[0].p99_wait_min <= records.levels[0].p99_wait_min
    assert in_bytes.levels[-1].p99_wait_min > 3 * records.levels[-1].p99_wait_min  # level 0
    assert in_bytes.utilization == 1.0
    # at most budget_bytes plus one record per level (a level with records reads at least one)
    assert in_bytes.run_max_s <= round(SIZES.seconds(70, 30_000 + 3_000 + 500 + 100), 1)


def test_the_drainer_policy_keeps_the_drains_backlog_aware_setting() -> None:
    trace = [[5, 5, 5] for _ in range(120)]
    results = compare(replace(DRAIN, backlog_aware=False), trace, policies=["seed", "drainer"])
    assert replace(results[1], policy="seed") == results[0]
    assert compare(DRAIN, trace, policies=["drainer"])[0] != results[1]  # it matters here


def test_builtin_traces_and_csv() -> None:
    for name in TRACES:
        trace = builtin_trace(name, DRAIN)
        assert trace and all(len(minute) == 3 and min(minute) >= 0 for minute in trace)
    with pytest.raises(ValueError, match="unknown"):
        builtin_trace("weekly", DRAIN)
    assert parse_trace("minute,0,1,2\n2,1,0,5\n0,3,,\n", 3) == [[3, 0, 0], [0, 0, 0], [1, 0, 5]]
    with pytest.raises(ValueError, match="header `minute,0,1,...`"):
        parse_trace("a,b\n1,2\n", 3, "arrivals.csv")
    with pytest.raises(ValueError, match="arrivals.csv:2: minute and counts must be whole"):
        parse_trace("minute,0\nx,1\n", 1, "arrivals.csv")


def test_record_sizes_per_level_in_either_form() -> None:
    assert Throughput.sizes("2000,1000,500", 3) == (2000.0, 1000.0, 500.0)
    assert Throughput.sizes("2000", 3) == (2000.0,)  # the last size stands for the levels above
    # level:bytes: an unnamed level has the size of the nearest named one below it
    assert Throughput.sizes("2:100,0:10000", 4) == (10000.0, 10000.0, 100.0, 100.0)
    assert Throughput.sizes("1:500", 3) == (500.0, 500.0, 500.0)  # below it: the lowest named
    assert Throughput(record_bytes=Throughput.sizes("2:100,0:10000", 3)).size(1) == 10000.0
    with pytest.raises(ValueError, match="name levels 0..2"):
        Throughput.sizes("3:100", 3)
    with pytest.raises(ValueError, match="level:bytes pairs"):
        Throughput.sizes("2:big", 3)


def test_cli_simulates_a_drain_on_a_csv_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import yaml

    from drainer.cli import main
    from drainer.settings import use_config_path

    body = {
        "topic": "o",
        "group": "g",
        "levels": 2,
        "budget": 30,
        "max_wait": {0: "10m"},
        "run_seconds": 6,
    }
    drains = tmp_path / "drains.yaml"
    drains.write_text(yaml.safe_dump({"drains": {"orders": {**body, "sink": {"table": "t"}}}}))
    arrivals = tmp_path / "arrivals.csv"
    arrivals.write_text("minute,0,1\n0,40,10\n3,0,5\n")
    with use_config_path(drains):
        speed = ["--fixed-s", "5", "--records-per-s", "10", "--record-bytes", "1:100,0:2000"]
        assert main(["simulate", "orders", "--trace", str(arrivals), *speed, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert main(["simulate", "orders", "--trace", "weekly"]) != 0
    results = {r["policy"]: r for r in report["traces"][str(arrivals)]}
    assert set(results) == set(POLICIES)
    # every record of the trace is drained: 40 + 0 at level 0, 10 + 5 at level 1
    assert [lv["records"] for lv in results["drainer"]["levels"]] == [15, 40]
    # the first run reads all 10 of level 1 and 20 of level 0: 5 s + 30 / 10 + 41,000 / 100,000;
    # it overshoots run_seconds 6, so the next budgets come from its throughput, below 30
    assert results["strict"]["run_max_s"] == 8.4
    assert results["strict"]["over_run_seconds"] >= 1 and results["strict"]["budget_p50"] < 30
    assert "neither a built-in trace" in capsys.readouterr().err
