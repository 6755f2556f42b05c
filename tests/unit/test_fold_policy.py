"""Which sink partitions fold next: a size-tiered policy that keeps the count bounded."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from drainer.sinks.postgres_folds import FANOUT, MAX_LIST_FOLD_RUNS, choose_fold, choose_list_fold
from drainer.store.sink_folds import fold_name
from drainer.store.sink_partitions import SinkPartition, _partition

YEAR_OF_FIVE_MINUTE_RUNS = 365 * 24 * 12


def _run(run_id: int, size: int = 0) -> SinkPartition:
    return SinkPartition(f"t_r{run_id}", run_id, run_id, 1, size)


def _listed(run_ids: list[int], size: int = 0) -> SinkPartition:
    ids = tuple(sorted(run_ids))
    return SinkPartition(f"t_f{ids[0]}", ids[0], ids[-1], len(ids), size, True, "t", ids)


def _list_folded(parts: list[SinkPartition]) -> SinkPartition:
    return _listed([i for p in parts for i in p.run_ids], sum(p.bytes for p in parts))


def _folded(parts: list[SinkPartition]) -> SinkPartition:
    first, last = min(p.first for p in parts), max(p.last for p in parts)
    runs, size = sum(p.runs for p in parts), sum(p.bytes for p in parts)
    return SinkPartition(fold_name("t", first, last), first, last, runs, size)


def _apply(parts: list[SinkPartition], sources: list[SinkPartition]) -> list[SinkPartition]:
    return [p for p in parts if p not in sources] + [_folded(sources)]


def _fold_all(
    parts: list[SinkPartition], fanout: int = FANOUT, max_bytes: int | None = None
) -> tuple[list[SinkPartition], int]:
    """Fold until choose_fold has nothing left; returns the partitions and the folds made."""
    folds = 0
    while sources := choose_fold(parts, fanout, max_bytes):
        parts = _apply(parts, sources)
        folds += 1
    return parts, folds


def _digit_sum(runs: int, fanout: int) -> int:
    """What folding to the end leaves: one partition per unit of each base-`fanout` digit."""
    total = 0
    while runs:
        total, runs = total + runs % fanout, runs // fanout
    return total


def _assert_disjoint(parts: list[SinkPartition]) -> None:
    ranged = sorted((p for p in parts if not p.listed), key=lambda p: p.first)
    assert all(a.last < b.first for a, b in zip(ranged, ranged[1:], strict=False)), ranged


def test_tiers_count_runs_in_powers_of_the_fanout():
    tiers = [SinkPartition("p", 1, n, n).tier(8) for n in (1, 7, 8, 63, 64, 512, 4096, 40000)]
    assert tiers == [0, 0, 1, 1, 2, 3, 4, 5]


def test_nothing_folds_below_the_fanout():
    assert choose_fold([_run(i) for i in range(FANOUT - 1)]) == []


def test_the_oldest_runs_of_the_lowest_full_tier_fold_first():
    tier1 = [_folded([_run(i) for i in range(k * 8, k * 8 + 8)]) for k in range(8)]
    runs = [_run(i) for i in range(100, 109)]
    assert choose_fold(tier1 + runs, 8) == runs[:8]
    assert choose_fold(tier1 + runs[:3], 8) == tier1


def test_a_range_partition_counts_the_runs_its_comment_or_its_bound_says():
    bound = "FOR VALUES FROM ('1') TO ('301')"
    hand = _partition("events_upto_300", "events", bound, None, 0)  # made by hand
    assert hand is not None and (hand.first, hand.last, hand.runs, hand.tier(8)) == (1, 300, 300, 2)
    folded = _partition("e", "events", bound, "drainer fold of events: 12 runs", 0)
    assert folded is not None and folded.runs == 12
    stage = _partition("e_r5", "events", "FOR VALUES FROM ('5') TO ('6')", None, 0)
    assert stage is not None and stage.runs == 1
    listed = _partition("e_f1", "events", "FOR VALUES IN ('3', '1', '2')", None, 0)
    assert listed is not None and (listed.first, listed.last, listed.runs, listed.listed) == (
        1,
        3,
        3,
        True,
    )
    assert _partition("d", "events", "DEFAULT", None, 0) is None
    assert _partition("m", "events", "FOR VALUES FROM (MINVALUE) TO ('5')", None, 0) is None


def test_names_say_which_runs_a_fold_holds_and_fit_postgres():
    assert fold_name("events", 3, 17) == "events_runs_3_17"
    assert fold_name("events", 3, 17, ["events_runs_3_17"]) == "events_runs_3_17_b"
    assert len(fold_name("x" * 63, 1, 2**62).encode()) <= 63


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6000), st.sampled_from([2, 4, 8, 16]))
def test_any_number_of_runs_leaves_fewer_than_fanout_partitions_per_tier(runs: int, fanout: int):
    """No top tier: a range bound holds any number of runs, so every tier stays below the
    fanout and the count is the runs' digit sum in base `fanout`."""
    parts: list[SinkPartition] = []
    folds = 0
    for run_id in range(1, runs + 1):  # a run attaches, then upkeep folds
        parts, made = _fold_all(parts + [_run(run_id)], fanout)
        folds += made
    tiers = [p.tier(fanout) for p in parts]
    assert all(tiers.count(t) < fanout for t in tiers)
    assert len(parts) == _digit_sum(runs, fanout)
    assert sum(p.runs for p in parts) == runs
    _assert_disjoint(parts)
    assert folds == (runs - len(parts)) // (fanout - 1)


def test_a_year_of_five_minute_runs_keeps_a_few_dozen_partitions():
    """105,120 runs, each followed by upkeep's folds: the most partitions ever is 7 per tier
    for the 6 tiers a year reaches, and after the year the digit sum of 105,120 in base 8."""
    parts: list[SinkPartition] = []
    most = 0
    for run_id in range(1, YEAR_OF_FIVE_MINUTE_RUNS + 1):
        parts, _ = _fold_all(parts + [_run(run_id)])
        most = max(most, len(parts))
    assert most <= 7 * 6 and len(parts) == _digit_sum(YEAR_OF_FIVE_MINUTE_RUNS, 8)
    assert max(p.runs for p in parts) == 8**5


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
            parts = _apply(parts, sources)
        tiers = [p.tier(fanout) for p in parts]
        assert all(tiers.count(t) < 2 * fanout for t in tiers)
    parts, _ = _fold_all(parts, fanout)  # `drainer maintain`
    assert len(parts) == _digit_sum(runs, fanout)
    assert sum(p.runs for p in parts) == runs


@settings(max_examples=60, deadline=None)
@given(st.integers(20, 400), st.randoms(use_true_random=False))
def test_runs_committing_out_of_order_never_make_overlapping_ranges(runs: int, rnd: random.Random):
    """Runs of drains sharing a target, or resumed plans, commit out of id order. A run whose
    id a fold already covers is copied into that fold (attach_run); otherwise it attaches.
    Folds take every partition their range meets, so ranges never overlap and no run is lost."""
    order = list(range(1, runs + 1))
    for _ in range(runs // 5):  # some runs commit a few places late
        i = rnd.randrange(len(order) - 1)
        j = min(len(order) - 1, i + rnd.randrange(1, 30))
        order.insert(j, order.pop(i))
    parts: list[SinkPartition] = []
    copied = 0
    for run_id in order:
        if any(p.first <= run_id <= p.last for p in parts):
            copied += 1  # the commit copies the rows into the covering fold
            cover = next(p for p in parts if p.first <= run_id <= p.last)
            parts = [p for p in parts if p != cover] + [
                SinkPartition(cover.name, cover.first, cover.last, cover.runs + 1, cover.bytes)
            ]
        else:
            parts.append(_run(run_id))
        parts, _ = _fold_all(parts)
        _assert_disjoint(parts)
    assert sum(p.runs for p in parts) == runs
    tiers = [p.tier(FANOUT) for p in parts]
    assert all(tiers.count(t) < FANOUT for t in tiers)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 40), st.integers(0, 60), st.integers(0, 5000))
def test_listed_partitions_of_an_earlier_version_fold_first_all_at_once(
    legacy_runs: int, new_runs: int, seed: int, max_bytes: int
):
    """A LIST target of an earlier version: its listed partitions (run partitions and LIST
    folds of up to 512 runs) move into one range partition in one fold, before any tier fold,
    while new runs attach by range; upkeep leaves big ones to `drainer maintain` only until a
    tier fold is due. In the end only tiers remain."""
    listed: list[SinkPartition] = []
    run_id = 1
    while run_id <= legacy_runs:  # the LIST tiers the earlier version left
        width = min(legacy_runs - run_id + 1, 1 + (run_id * 7919 + seed) % 512)
        listed.append(_listed(list(range(run_id, run_id + width)), size=width))
        run_id += width
    parts = list(listed)
    for new in range(legacy_runs + 1, legacy_runs + new_runs + 1):
        parts.append(_run(new, 1))
        while sources := choose_fold(parts, max_bytes=max_bytes):
            still = [p for p in parts if p.listed]
            if still:  # all of them, before any other fold
                assert [p for p in sources if p.listed] == still
            parts = _apply(parts, sources)
            _assert_disjoint(parts)
        assert len([p for p in parts if p.listed]) < 2 * FANOUT
        if any(p.listed for p in parts):  # waiting for maintain, for fewer than FANOUT runs
            assert len([p for p in parts if not p.listed]) < FANOUT
    parts, _ = _fold_all(parts)  # `drainer maintain`
    assert not any(p.listed for p in parts)
    assert sum(p.runs for p in parts) == legacy_runs + new_runs
    tiers = [p.tier(FANOUT) for p in parts]
    assert all(tiers.count(t) < FANOUT for t in tiers)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 2500), st.integers(0, 30))
def test_a_list_target_with_thousands_of_run_partitions_is_folded_by_the_same_upkeep(
    legacy_runs: int, new_runs: int
):
    """The earliest versions left one LIST partition per run. fold_sink first folds them as
    LIST tiers, eight at a time and at most 512 run ids a bound, then gives the target its
    `<table>_runs` and moves every listed partition in one fold, which therefore locks at most
    a few dozen partitions (a transaction cannot lock thousands); then only range tiers."""
    parts = [_listed([i]) for i in range(1, legacy_runs + 1)]
    has_runs_parent = False
    biggest_fold = 0

    def upkeep(parts: list[SinkPartition]) -> list[SinkPartition]:
        nonlocal has_runs_parent, biggest_fold
        while True:
            if not has_runs_parent:
                sources = choose_list_fold(parts)
                if sources:
                    assert sum(p.runs for p in sources) <= MAX_LIST_FOLD_RUNS
                    parts = [p for p in parts if p not in sources] + [_list_folded(sources)]
                    continue
                has_runs_parent = True
            sources = choose_fold(parts)
            if not sources:
                return parts
            biggest_fold = max(biggest_fold, len(sources))
            parts = _apply(parts, sources)

    parts = upkeep(parts)
    for run_id in range(legacy_runs + 1, legacy_runs + new_runs + 1):
        parts = upkeep([*parts, _run(run_id)])
    assert not any(p.listed for p in parts)
    assert biggest_fold <= 3 * (FANOUT - 1) + legacy_runs // MAX_LIST_FOLD_RUNS + 1
    assert sum(p.runs for p in parts) == legacy_runs + new_runs
    tiers = [p.tier(FANOUT) for p in parts]
    assert all(tiers.count(t) < FANOUT for t in tiers)
    _assert_disjoint(parts)
