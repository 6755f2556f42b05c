"""The policy simulator: every record is accounted for, and the policies keep their promises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drainer.allocation.simulate import (
    POLICIES,
    TRACES,
    Drain,
    builtin_trace,
    compare,
    parse_trace,
    simulate,
)

DRAIN = Drain(levels=3, budget=70, max_wait_ms={0: 20 * 60_000, 1: 20 * 60_000, 2: 20 * 60_000})
TRACE = st.lists(st.lists(st.integers(0, 40), min_size=3, max_size=3), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(TRACE, st.sampled_from(sorted(POLICIES)))
def test_every_arrival_is_drained_once(trace: list[list[int]], policy: str) -> None:
    result = simulate(DRAIN, trace, policy, interval_min=5)
    assert result.runs_to_empty is not None
    for level in result.levels:
        assert level.records == sum(minute[level.level] for minute in trace)
        assert 0 <= level.p50_wait_min <= level.p99_wait_min <= level.max_wait_min


@settings(max_examples=60, deadline=None)
@given(TRACE)
def test_backlog_aware_policies_use_the_whole_budget_whenever_the_backlog_covers_it(
    trace: list[list[int]],
) -> None:
    results = {r.policy: r for r in compare(DRAIN, trace)}
    for name in ("strict", "drainer", "drainer+max_wait"):
        assert results[name].utilization == 1.0
    assert results["strict"].inversions == results["drainer"].inversions == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=3, max_size=3), min_size=1, max_size=200))
def test_below_capacity_no_record_waits_past_max_wait(trace: list[list[int]]) -> None:
    # at most 12 records a minute: 60 per 5-minute run, under the budget of 70
    for level in compare(DRAIN, trace, policies=["drainer+max_wait"])[0].levels:
        assert level.over_max_wait == 0 and level.max_wait_min <= 5


def test_max_wait_of_the_lowest_level_bounds_its_wait_through_a_top_level_burst() -> None:
    """Level 0 gets 3 records a minute (15 a run, above its reserved 10), level 2 gets 10 a
    minute and 30 a minute for an hour (above capacity). Without max_wait level 0 queues behind
    level 2's backlog for as long as it lasts; with `max_wait: {0: 20m}` it waits about that."""
    trace = [[3, 0, 30 if 60 <= m < 120 else 10] for m in range(360)]
    drain = Drain(levels=3, budget=70, max_wait_ms={0: 20 * 60_000})
    plain, bounded = compare(drain, trace, policies=["drainer", "drainer+max_wait"])
    assert plain.levels[-1].max_wait_min > 60
    assert bounded.levels[-1].max_wait_min <= 20 + 5  # its limit, plus a run interval
    assert bounded.levels[-1].over_max_wait <= plain.levels[-1].over_max_wait
    assert plain.utilization == bounded.utilization == 1.0


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


def test_cli_simulates_a_drain_on_a_csv_trace(tmp_path, capsys) -> None:
    import json

    import yaml

    from drainer.cli import main
    from drainer.settings import use_config_path

    body = {"topic": "o", "group": "g", "levels": 2, "budget": 30, "max_wait": {0: "10m"}}
    drains = tmp_path / "drains.yaml"
    drains.write_text(yaml.safe_dump({"drains": {"orders": {**body, "sink": {"table": "t"}}}}))
    arrivals = tmp_path / "arrivals.csv"
    arrivals.write_text("minute,0,1\n0,40,10\n3,0,5\n")
    with use_config_path(drains):
        assert main(["simulate", "orders", "--trace", str(arrivals), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert main(["simulate", "orders", "--trace", "weekly"]) != 0
    results = {r["policy"]: r for r in report["traces"][str(arrivals)]}
    assert set(results) == set(POLICIES)
    # every record of the trace is drained: 40 + 0 at level 0, 10 + 5 at level 1
    assert [lv["records"] for lv in results["drainer"]["levels"]] == [15, 40]
    assert "neither a built-in trace" in capsys.readouterr().err
