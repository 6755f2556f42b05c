"""A drain's settings reach its allocation policy unchanged (`lifecycle.planning.allocation_policy`)."""

from __future__ import annotations

import yaml

from drainer.config import load_drains
from drainer.lifecycle.planning import EventTimeLookups, allocation_policy


def drain(tmp_path, **overrides):
    body = {"topic": "orders", "group": "billing", "levels": 3, "budget": 70}
    body |= {"sink": {"table": "out"}, **overrides}
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": {"orders": body}}))
    return load_drains(path)["orders"]


def test_policy_carries_every_allocation_setting(tmp_path):
    config = drain(
        tmp_path,
        distributor="linear",
        history_window=5,
        maxout_threshold=2,
        backlog_aware=False,
        max_gap_seconds=1.5,
        align="drain",
        max_wait={0: "15m"},
    )
    lookups = EventTimeLookups(lambda *a: 0, lambda *a: None, now_ms=123)
    policy = allocation_policy(config, [0, 2], {0: [1], 2: [3]}, lookups)
    assert (policy.budget, policy.levels, policy.distributor) == (70, (0, 2), "linear")
    assert (policy.window, policy.maxout_threshold, policy.backlog_aware) == (5, 2, False)
    assert (policy.max_gap_ms, policy.align) == (1500, "drain")
    assert policy.offset_for_time is lookups.offset_for_time
    assert policy.history == {0: [1], 2: [3]}
    assert (policy.max_wait_ms, policy.now_ms) == ({0: 900_000}, 123)


def test_without_lookups_alignment_and_max_wait_are_off_and_shares_still_answer(tmp_path):
    config = drain(tmp_path, max_gap_seconds=60, max_wait="1h")
    policy = allocation_policy(config, [0, 1, 2], {})
    assert policy.max_gap_ms is None and policy.max_wait_ms is None
    assert policy.reserved() == {0: 10, 1: 20, 2: 40}


def test_the_run_budget_sets_the_record_and_byte_budgets(tmp_path):
    from drainer.allocation.timebox import RunThroughput, timeboxed_budget
    from drainer.lifecycle.budgets import RunBudget

    config = drain(tmp_path, run_seconds=10, budget_bytes="1KB")
    box = timeboxed_budget(10, 70, [RunThroughput(20, 10.0, 2_000)], minimum=7)
    budget = RunBudget(box.budget, 70, box, 1_000, {(0, 0): 50.0}, ((0, 0),))
    policy = allocation_policy(config, [0, 1, 2], {}, None, budget)
    assert (policy.budget, policy.budget_bytes, policy.record_bytes) == (20, 1_000, {(0, 0): 50.0})
    assert budget.summary() == (
        "run_seconds: budget 20 of 70 (2 records/s, 200 bytes/s, 2 records/s (median of the "
        "last 1 full runs)); budget_bytes: 1,000 bytes; record sizes of 1 partitions known, 1 sampled "
        "from Kafka"
    )
    assert budget.as_dict()["record_bytes"] == [{"level": 0, "partition": 0, "avg_bytes": 50.0}]
    # a drain that sets neither key: the configured budget, no byte rule, nothing to say
    plain = allocation_policy(drain(tmp_path), [0, 1, 2], {}, None, RunBudget(70, 70))
    assert (plain.budget, plain.budget_bytes) == (70, None)
    assert RunBudget(70, 70).summary() is None
