"""A level's health by Burrow's rules, its rates and ETA (drainer.observe.health_rules)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainer.observe.health_rules import Health, RunSample, format_seconds, level_health

NOW = 10_000.0


def runs(*rows: tuple[float, int, int, int]) -> list[RunSample]:
    """(seconds before now, backlog before, drained, backlog after) per run, oldest first."""
    return [RunSample(NOW - ago, before, drained, after) for ago, before, drained, after in rows]


@pytest.mark.parametrize(
    ("samples", "backlog", "state"),
    [
        pytest.param([], 0, Health.OK, id="never-run-nothing-waiting"),
        pytest.param([], 10, Health.STOP, id="never-run-records-waiting"),
        pytest.param(
            runs((900, 100, 100, 0), (600, 50, 50, 0), (300, 30, 30, 0)), 0, Health.OK, id="empty"
        ),
        pytest.param(
            runs((900, 1000, 300, 700), (600, 700, 300, 400), (300, 400, 300, 100)),
            100,
            Health.OK,
            id="throttled-but-shrinking",
        ),
        pytest.param(
            runs((900, 1000, 300, 800), (600, 900, 300, 900), (300, 1100, 300, 1000)),
            1100,
            Health.WARN,
            id="throttled-not-shrinking",
        ),
        pytest.param(
            runs((900, 500, 0, 500), (600, 500, 0, 500), (300, 500, 0, 500)),
            500,
            Health.STALL,
            id="offset-never-moves",
        ),
        pytest.param(
            runs((4000, 500, 100, 400), (3700, 400, 100, 300), (3400, 300, 100, 200)),
            300,
            Health.STOP,
            id="runs-stopped-while-waiting",
        ),
        pytest.param(
            runs((4000, 500, 100, 400), (3700, 400, 100, 300), (3400, 300, 300, 0)),
            0,
            Health.OK,
            id="runs-stopped-nothing-waiting",
        ),
    ],
)
def test_state_follows_burrows_rules(samples, backlog, state):
    assert level_health(0, samples, backlog, NOW).state is state


def test_rates_and_eta_of_a_shrinking_backlog():
    # 600 s from the first run to now: 600 drained after it, backlog 700 -> 100 => 0 arrived
    health = level_health(
        1, runs((600, 1000, 300, 700), (300, 700, 300, 400), (0, 400, 300, 100)), 100, NOW
    )
    assert health.drain_rate == pytest.approx(1.0)
    assert health.arrival_rate == pytest.approx(0.0)
    assert health.eta_s == pytest.approx(100.0)
    assert not health.growing and health.eta_text() == "2 min"


def test_growing_backlog_has_no_eta():
    health = level_health(
        0, runs((600, 100, 100, 200), (300, 400, 100, 600), (0, 800, 100, 900)), 1000, NOW
    )
    assert health.growing and health.eta_s is None and health.eta_text() == "growing"


def test_oldest_age_only_when_something_waits():
    assert level_health(0, [], 5, NOW, oldest_timestamp=NOW - 42).oldest_age_s == 42
    assert level_health(0, [], 0, NOW, oldest_timestamp=NOW - 42).oldest_age_s is None


def test_a_level_that_keeps_up_is_not_growing_and_empties_at_the_next_run():
    # 10 records/s, a run every 300 s drains all 3000 it finds; 100 s after the last run the
    # 1000 new records wait for the next one. Counting those 100 idle seconds in the drain rate
    # made this look like arrivals outpacing the drain.
    health = level_health(
        0, runs((700, 3000, 3000, 0), (400, 3000, 3000, 0), (100, 3000, 3000, 0)), 1000, NOW
    )
    assert health.keeping_up and not health.growing
    assert health.arrival_rate == pytest.approx(10.0)
    assert health.drain_rate == pytest.approx(10.0)
    assert health.eta_s == pytest.approx(200.0)  # the usual 300 s between runs, 100 s gone
    assert health.state is Health.OK


def test_a_stopped_level_has_no_eta():
    # it kept up, but its runs stopped 3400 s ago (usual interval 300 s)
    health = level_health(0, runs((4000, 100, 100, 0), (3700, 100, 100, 0)), 500, NOW)
    assert health.state is Health.STOP and health.keeping_up
    assert health.eta_s is None and health.eta_text() == "unknown"


def test_one_run_gives_an_arrival_rate_but_no_drain_rate():
    health = level_health(0, runs((100, 50, 20, 30)), 230, NOW)
    assert health.arrival_rate == pytest.approx(2.0)  # 200 more records in 100 s
    assert health.drain_rate is None and health.eta_s is None and not health.growing
    assert health.eta_text() == "too little history (1 run; 2 needed)"  # before: "unknown"


def test_a_stalled_level_is_not_called_growing():
    health = level_health(0, runs((600, 500, 0, 500), (300, 500, 0, 500)), 500, NOW)
    assert health.state is Health.STALL
    assert health.drain_rate == 0 and health.arrival_rate == 0
    assert not health.growing and health.eta_s is None


@given(
    st.lists(
        st.tuples(
            st.floats(1, 5000), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6)
        ),
        max_size=8,
    ),
    st.integers(0, 10**6),
)
def test_eta_is_defined_exactly_when_the_level_can_empty(rows, backlog):
    health = level_health(0, runs(*sorted(rows, reverse=True)), backlog, NOW)
    assert health.arrival_rate is None or health.arrival_rate >= 0
    assert health.drain_rate is None or health.drain_rate >= 0
    if backlog == 0:
        assert health.eta_s == 0 and not health.growing
        assert health.state is Health.OK  # nothing waits: never a problem
        return
    assert not (health.growing and health.eta_s is not None)
    if health.state is Health.STOP:
        assert health.eta_s is None
        return
    if health.keeping_up:  # the next run empties it: ETA is the time left until then
        assert not health.growing
        assert health.eta_s is None or health.eta_s >= 0
    elif health.eta_s is not None:  # throttled: emptied only by outpacing the arrivals
        assert health.eta_s > 0
        assert health.drain_rate is not None and health.arrival_rate is not None
        assert health.drain_rate > health.arrival_rate
    elif health.growing:  # throttled and the arrivals keep pace
        assert health.drain_rate is not None and health.arrival_rate is not None
        assert health.arrival_rate > 0 and health.arrival_rate >= health.drain_rate


@pytest.mark.parametrize(
    ("seconds", "text"), [(5, "5 s"), (300, "5 min"), (7200, "2.0 h"), (3 * 86400, "3.0 d")]
)
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_a_burst_the_runs_drained_is_not_still_arriving():
    """Before: right after a burst, "arriving 500.8/s" while nothing arrived, and an ETA built
    on it. A burst of 50,000 came between the runs 400 s and 77 s ago; the latter drained it."""
    health = level_health(0, runs((400, 0, 0, 0), (77, 50_000, 40_000, 10_000)), 10_000, NOW)
    assert health.arrival_rate == pytest.approx(0.0)
    assert health.drain_rate is not None and health.eta_s is not None


def test_a_drain_without_a_schedule_is_judged_by_its_max_wait_not_a_cadence():
    """Before: a drain run by hand showed every level STOP ("last run 77 s ago, more than 3
    times the usual 17 s")."""
    by_hand = runs((111, 10, 10, 0), (94, 10, 10, 0))
    health = level_health(0, by_hand, 10, NOW, oldest_timestamp=NOW - 77, scheduled=False)
    assert health.state is Health.OK, health.reason
    assert health.eta_text() == "at the next run (no schedule)"
    assert level_health(0, by_hand, 10, NOW, oldest_timestamp=NOW - 77).state is Health.STOP
    within = level_health(
        0, by_hand, 10, NOW, oldest_timestamp=NOW - 77, scheduled=False, max_wait_s=3600
    )
    assert within.state is Health.OK
    late = level_health(
        0, by_hand, 10, NOW, oldest_timestamp=NOW - 7200, scheduled=False, max_wait_s=3600
    )
    assert late.state is Health.STOP and "past the level's max_wait of 60 min" in late.reason
    never = level_health(0, [], 10, NOW, oldest_timestamp=NOW - 5, scheduled=False)
    assert never.state is Health.OK and "no schedule" in never.reason
