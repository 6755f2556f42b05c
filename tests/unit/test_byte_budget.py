"""Byte budgets (`budget_bytes`): the plan stops at a number of bytes too (drainer.allocation.bytes)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drainer.allocation import AllocationPolicy, PartitionBacklog
from drainer.allocation.bytes import byte_caps
from tests.unit.test_allocation import HISTORIES, plan_inputs

HEAVY = settings(max_examples=100, deadline=None)
SIZES = st.floats(1, 2_000_000, allow_nan=False)


def _sizes(draw: st.DrawFn, partitions: list[PartitionBacklog]) -> dict[tuple[int, int], float]:
    return {(p.level, p.partition): draw(SIZES) for p in partitions}


def test_a_level_of_large_records_cannot_fill_a_run_meant_for_small_ones() -> None:
    parts = [PartitionBacklog(1, 0, 0, 10_000), PartitionBacklog(0, 0, 0, 10_000)]
    sizes = {(1, 0): 100.0, (0, 0): 1_000_000.0}
    plain = AllocationPolicy(budget=3_000).plan(parts)
    assert plain.levels[0].planned == 1_000  # 1 GB of level 0 records in a 3,000-record run
    capped = AllocationPolicy(budget=3_000, budget_bytes=100_000_000, record_bytes=sizes).plan(
        parts
    )
    # level 0 gets its third of the bytes plus what level 1's whole backlog leaves: 99 records
    # of 1 MB; the records it cannot take go to level 1, whose records are small
    assert capped.levels[0].planned == (100_000_000 - 10_000 * 100) // 1_000_000 == 99
    assert capped.levels[1].planned == 3_000 - 99
    assert capped.levels[0].byte_cap == capped.levels[0].planned
    total = sum(lp.planned_bytes or 0 for lp in capped.levels.values())
    assert total <= 100_000_000
    assert capped.levels[0].planned_bytes == capped.levels[0].planned * 1_000_000


def test_a_record_larger_than_its_share_is_still_read_one_at_a_time() -> None:
    parts = [PartitionBacklog(1, 0, 0, 5), PartitionBacklog(0, 0, 0, 5)]
    plan = AllocationPolicy(
        budget=3, budget_bytes=1_000, record_bytes={(1, 0): 10.0, (0, 0): 5_000.0}
    ).plan(parts)
    assert plan.levels[0].planned == 1  # no level starves on a record bigger than its share


def test_invalid_byte_budget_says_what_to_set() -> None:
    with pytest.raises(ValueError, match="budget_bytes is 0: set a size > 0"):
        AllocationPolicy(budget=3, budget_bytes=0)


def test_byte_caps_offer_unused_bytes_highest_level_first() -> None:
    caps = byte_caps({2: 4, 1: 2, 0: 1}, {2: 1_000, 1: 1_000, 0: 1}, {2: 10, 1: 10, 0: 10}, 700)
    # level 0 needs 10 of its 100 bytes: 90 go to level 2 first
    assert caps == {2: 40 + 9, 1: 20, 0: 1}


@HEAVY
@given(plan_inputs(), HISTORIES, st.data())
def test_without_a_byte_budget_or_sizes_the_plan_is_todays(inputs, history, data) -> None:
    n_levels, partitions, budget = inputs
    levels = range(n_levels)
    today = AllocationPolicy(budget=budget, levels=levels, history=history).plan(partitions)
    sizes = _sizes(data.draw, partitions)
    for policy in (
        AllocationPolicy(budget=budget, levels=levels, history=history, record_bytes=sizes),
        AllocationPolicy(budget=budget, levels=levels, history=history, budget_bytes=10**6),
    ):
        assert policy.plan(partitions) == today


@HEAVY
@given(plan_inputs(), HISTORIES, st.data())
def test_a_plan_within_the_byte_budget_is_todays_with_its_estimate(inputs, history, data) -> None:
    n_levels, partitions, budget = inputs
    levels = range(n_levels)
    sizes = _sizes(data.draw, partitions)
    today = AllocationPolicy(budget=budget, levels=levels, history=history).plan(partitions)
    roomy = AllocationPolicy(
        budget=budget, levels=levels, history=history, budget_bytes=10**18, record_bytes=sizes
    ).plan(partitions)
    plain = {k: replace(v, byte_cap=None, planned_bytes=None) for k, v in roomy.levels.items()}
    assert replace(roomy, levels=plain) == today


@HEAVY
@given(plan_inputs(), HISTORIES, st.integers(1, 10**9), st.data())
def test_the_plan_fits_the_byte_budget(inputs, history, budget_bytes, data) -> None:
    n_levels, partitions, budget = inputs
    levels = range(n_levels)
    sizes = _sizes(data.draw, partitions)
    plan = AllocationPolicy(
        budget=budget, levels=levels, history=history, budget_bytes=budget_bytes, record_bytes=sizes
    ).plan(partitions)
    by_level: dict[int, float] = {}
    for r in plan.ranges:
        by_level[r.level] = by_level.get(r.level, 0) + r.records * sizes[(r.level, r.partition)]
    # within budget, except the one record each level may read when it is larger than its share
    largest = {
        p.level: max(sizes[(q.level, q.partition)] for q in partitions if q.level == p.level)
        for p in partitions
    }
    over = sum(largest[lvl] for lvl, lp in plan.levels.items() if lp.planned == 1)
    assert sum(by_level.values()) <= budget_bytes + over + 1e-6
    assert plan.total_planned <= budget
    for lp in plan.levels.values():
        assert lp.planned <= (lp.byte_cap if lp.byte_cap is not None else lp.planned)
