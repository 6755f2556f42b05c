"""Which sink partitions fold next: a size-tiered policy that keeps the count bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from drainer.lifecycle.maintain import FANOUT, choose_fold
from drainer.store.sink_folds import SinkPartition, fold_name


def _run(run_id: int) -> SinkPartition:
    return SinkPartition(f"t_r{run_id}", (run_id,))


def _folded(parts: list[SinkPartition]) -> SinkPartition:
    ids = tuple(sorted(i for p in parts for i in p.run_ids))
    return SinkPartition(fold_name("t", ids), ids)


def _fold_all(parts: list[SinkPartition], fanout: int) -> tuple[list[SinkPartition], int]:
    """Fold until choose_fold has nothing left; returns the partitions and the folds made."""
    folds = 0
    while sources := choose_fold(parts, fanout):
        parts = [p for p in parts if p not in sources] + [_folded(sources)]
        folds += 1
    return parts, folds


def test_tiers_count_runs_in_powers_of_the_fanout():
    assert [SinkPartition("p", tuple(range(n))).tier(8) for n in (1, 7, 8, 63, 64, 512)] == [
        0,
        0,
        1,
        1,
        2,
        3,
    ]


def test_nothing_folds_below_the_fanout():
    assert choose_fold([_run(i) for i in range(FANOUT - 1)]) == []


def test_the_oldest_runs_of_the_lowest_full_tier_fold_first():
    tier1 = [_folded([_run(i) for i in range(k * 8, k * 8 + 8)]) for k in range(8)]
    runs = [_run(i) for i in range(100, 109)]
    assert choose_fold(tier1 + runs, 8) == runs[:8]
    assert choose_fold(tier1 + runs[:3], 8) == tier1


def test_a_hand_folded_partition_joins_the_tier_of_its_size():
    hand = SinkPartition("events_upto_300", tuple(range(1, 301)))  # the old docs' recipe
    assert hand.tier(8) == 2
    assert choose_fold([hand] + [_run(i) for i in range(301, 308)], 8) == []


def test_names_say_which_runs_a_fold_holds_and_fit_postgres():
    assert fold_name("events", [17, 3, 9]) == "events_f3_17"
    assert len(fold_name("x" * 63, [1, 2**62]).encode()) <= 63


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000), st.sampled_from([2, 4, 8, 16]))
def test_any_number_of_runs_leaves_at_most_fanout_minus_one_per_tier(runs: int, fanout: int):
    parts: list[SinkPartition] = []
    folds = 0
    for run_id in range(1, runs + 1):  # a run attaches, then upkeep folds
        parts, made = _fold_all(parts + [_run(run_id)], fanout)
        folds += made
    tiers = {p.tier(fanout) for p in parts}
    assert all(sum(p.tier(fanout) == t for p in parts) < fanout for t in tiers)
    # base-`fanout` digits of the run count: the most partitions that many runs can need
    digits, n = 0, runs
    while n:
        digits, n = digits + n % fanout, n // fanout
    assert len(parts) == digits
    assert sorted(i for p in parts for i in p.run_ids) == list(range(1, runs + 1))
    assert folds == (runs - digits) // (fanout - 1)
