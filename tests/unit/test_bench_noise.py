"""The no-regression check's verdict (benchmarks/fair.py): a distribution-free interval for the
median of the paired after/before ratios, and a verdict only when that interval excludes 1."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.fair import median_interval, noise_verdict


def test_five_rounds_give_the_extremes_at_94_percent():
    assert median_interval([1.3, 0.9, 1.1, 1.0, 1.2]) == (0.9, 1.3, 1 - 2 / 32)


def test_more_rounds_narrow_the_interval():
    low, high, confidence = median_interval([float(v) for v in range(1, 10)])
    assert (low, high) == (2.0, 8.0) and confidence >= 0.9


@given(st.lists(st.floats(0.1, 10), min_size=5, max_size=40, unique=True))
def test_the_interval_holds_the_median_with_the_stated_confidence(values):
    low, high, confidence = median_interval(values)
    ordered = sorted(values)
    assert low <= ordered[(len(values) - 1) // 2] <= ordered[len(values) // 2] <= high
    k = ordered.index(low) + 1  # low is the k-th smallest (values unique): the median is below
    below = sum(math.comb(len(values), i) for i in range(k)) / 2 ** len(
        values
    )  # it w.p. P(Bin < k)
    assert confidence >= 0.9 and math.isclose(confidence, 1 - 2 * below)


def test_slower_only_when_slower_in_every_one_of_five_rounds():
    assert noise_verdict([1.05, 1.2, 1.1, 1.01, 1.3]).startswith("slower beyond noise")
    assert noise_verdict([0.99, 1.2, 1.1, 1.01, 1.3]).startswith("within noise")
    assert noise_verdict([0.9, 0.8, 0.95, 0.99, 0.7]).startswith("faster beyond noise")


def test_too_few_rounds_say_so():
    assert noise_verdict([1.5, 1.6, 1.7]).startswith("too few counted rounds (3)")
    assert noise_verdict([]).startswith("too few counted rounds (0)")


def test_a_report_pairs_drainer_with_each_peer_round_by_round():
    from benchmarks.fair import DRAINER, LIMIT, TUNED, Contender, paired, report

    walls = {
        "ours": [1.0, 2.0, 1.1, 1.9, 1.05],
        "peer": [1.25, 2.5, 1.3, 2.2, 1.2],  # every round slower than ours, the rounds drift
        "limit": [0.5, 0.5, 0.5, 0.5, 0.5],
        "short": [1.0, 1.0],  # fewer rounds: nothing to pair
    }
    paths = [
        Contender("ours", DRAINER, "drainer"),
        Contender("peer", TUNED, "a peer"),
        Contender("limit", LIMIT, "the limit"),
        Contender("short", TUNED, "a peer with fewer rounds"),
    ]
    rows = {r["path"]: r for r in report("test", 1000, paths, walls)}
    found = rows["peer"]["drainer_over_this_paired"]
    assert found == paired(walls, "ours", "peer")
    assert found["verdict"].startswith("faster beyond noise") and found["high"] < 1
    assert rows["ours"]["drainer_over_this_paired"] is None
    assert rows["short"]["drainer_over_this_paired"] is None
