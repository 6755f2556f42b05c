"""Which sink partitions fold next: a size-tiered policy that keeps the count bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from drainer.lifecycle.maintain import FANOUT, MAX_FOLD_RUNS, choose_fold
from drainer.store.sink_folds import SinkPartition, fold_name


def _run(run_id: int, size: int = 0) -> SinkPartition:
    return SinkPartition(f"t_r{run_id}", (run_id,), size)


def _folded(parts: list[SinkPartition]) -> SinkPartition:
    ids = tuple(sorted(i for p in parts for i in p.run_ids))
    return SinkPartition(fold_name("t", ids), ids, sum(p.bytes for p in parts))


def _fold_all(
    parts: list[SinkPartition], fanout: int, max_bytes: int | None = None
) -> tuple[list[SinkPartition], int]:
    """Fold until choose_fold has nothing left; returns the partitions and the folds made."""
    folds = 0
    while sources := choose_fold(parts, fanout, max_bytes):
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


def _most_partitions(runs: int, fanout: int, max_runs: int = MAX_FOLD_RUNS) -> int:
    """What folding to the end leaves: the base-`fanout` digits of the runs below the top tier
    (the biggest whose partitions list at most `max_runs` runs), plus one per top partition."""
    unit = 1
    while unit * fanout <= max_runs:
        unit *= fanout
    digits, n = runs // unit, runs % unit
    while n:
        digits, n = digits + n % fanout, n // fanout
    return digits


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6000), st.sampled_from([2, 4, 8, 16]))
def test_any_number_of_runs_leaves_at_most_fanout_minus_one_per_tier_below_the_top(
    runs: int, fanout: int
):
    """Below the top tier a target keeps fewer than `fanout` partitions; the top tier (512
    runs a partition at FANOUT 8: a LIST bound holds no more) grows by one per 512 runs."""
    parts: list[SinkPartition] = []
    folds = 0
    for run_id in range(1, runs + 1):  # a run attaches, then upkeep folds
        parts, made = _fold_all(parts + [_run(run_id)], fanout)
        folds += made
    assert all(len(p.run_ids) <= MAX_FOLD_RUNS for p in parts)
    below_top = [p.tier(fanout) for p in parts if len(p.run_ids) * fanout <= MAX_FOLD_RUNS]
    assert all(below_top.count(t) < fanout for t in below_top)
    assert len(parts) == _most_partitions(runs, fanout)
    assert sorted(i for p in parts for i in p.run_ids) == list(range(1, runs + 1))
    assert folds == (runs - len(parts)) // (fanout - 1)


def test_past_4096_runs_only_the_top_tier_grows():
    """At FANOUT 8 the top tier holds 512-run partitions; 8 of them would list 4,096 run ids,
    more than a pg_class row holds, so they are never folded (docs/operations.md)."""
    assert MAX_FOLD_RUNS == 512 and FANOUT == 8
    assert _most_partitions(4095, 8) == 7 + 7 + 7 + 7
    assert _most_partitions(4096, 8) == 8
    assert _most_partitions(105_000, 8) == 205 + _most_partitions(105_000 % 512, 8)
    top = [_folded([_run(i) for i in range(k * 512, k * 512 + 512)]) for k in range(8)]
    assert choose_fold(top) == []


def test_upkeep_leaves_a_fold_bigger_than_its_limit_until_the_tier_is_twice_full():
    tier1 = [_folded([_run(i, 10) for i in range(k * 8, k * 8 + 8)]) for k in range(8)]
    assert choose_fold(tier1, 8, max_bytes=639) == []  # 8 x 80 bytes: maintain's fold
    assert choose_fold(tier1, 8, max_bytes=640) == tier1
    more = [_folded([_run(i, 10) for i in range(k * 8, k * 8 + 8)]) for k in range(8, 16)]
    assert choose_fold(tier1 + more, 8, max_bytes=1) == tier1  # twice full: folded anyway
    small = [_run(i, 10) for i in range(200, 208)]
    assert choose_fold(tier1 + small, 8, max_bytes=100) == small  # the big tier waits


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 3000),
    st.sampled_from([2, 4, 8]),
    st.lists(st.integers(0, 100), min_size=1, max_size=50),
    st.integers(0, 5000),
)
def test_upkeep_with_a_byte_limit_keeps_every_tier_under_twice_the_fanout(
    runs: int, fanout: int, sizes: list[int], max_bytes: int
):
    """Inside runs, folds stay under the limit or happen at a twice-full tier; the partition
    count stays bounded without `drainer maintain`, and maintain then folds as before."""
    parts: list[SinkPartition] = []
    for run_id in range(1, runs + 1):
        parts.append(_run(run_id, sizes[run_id % len(sizes)]))
        while sources := choose_fold(parts, fanout, max_bytes):
            tier = sources[0].tier(fanout)
            in_tier = sum(p.tier(fanout) == tier for p in parts)
            assert sum(p.bytes for p in sources) <= max_bytes or in_tier >= 2 * fanout
            parts = [p for p in parts if p not in sources] + [_folded(sources)]
        # the top tier, whose partitions cannot fold further, grows (see the test above)
        tiers = [p.tier(fanout) for p in parts if len(p.run_ids) * fanout <= MAX_FOLD_RUNS]
        assert all(tiers.count(t) < 2 * fanout for t in tiers)
    parts, _ = _fold_all(parts, fanout)  # `drainer maintain`
    assert len(parts) == _most_partitions(runs, fanout)
    assert sorted(i for p in parts for i in p.run_ids) == list(range(1, runs + 1))
