"""Requested levels are honoured, and launches sharing a key end as one run (drainer.store.launches)."""

from __future__ import annotations

import pytest
from lifecycle_helpers import assert_each_record_once, published_rows
from sqlalchemy import text

from drainer.errors import RunFailed
from drainer.kafka.producer import synthetic_records
from drainer.lifecycle.run import drain_once
from drainer.settings import load_settings
from spark_jobs import drain_job
from tests.support.stack import get_engine, produce_records


def _runs(drain) -> list:
    with get_engine().connect() as conn:
        return conn.execute(
            text(
                "SELECT id, status, levels, launch_key, phases FROM runs WHERE drain = :d ORDER BY id"
            ),
            {"d": drain.name},
        ).all()


def _drained(drain) -> dict[int, int]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                "SELECT rl.level, sum(rl.drained) AS n FROM run_levels rl JOIN runs r "
                "ON r.id = rl.run_id WHERE r.drain = :d AND r.status = 'committed' GROUP BY rl.level"
            ),
            {"d": drain.name},
        )
        return {row.level: int(row.n) for row in rows}


def test_two_launches_with_one_launch_key_are_one_run_sharing_the_budget(make_drain, spark):
    drain = make_drain(budget=700)
    for level in range(3):
        produce_records(drain, synthetic_records(1000, seed=level), level=level)
    key = "dagster-backfill:test"
    first = drain_job.run(
        drain, levels=[0, 2], trigger="backfill", launch_key=key, settings=load_settings()
    )
    # the sibling launch (Dagster's run for the range 2..2) reports the same run
    sibling = drain_job.run(
        drain, levels=[0, 2], trigger="backfill", launch_key=key, settings=load_settings()
    )

    assert not first.shared and sibling.shared and sibling.run_id == first.run_id
    runs = _runs(drain)
    assert [(r.status, list(r.levels), r.launch_key) for r in runs] == [("committed", [0, 2], key)]
    assert first.drained == 700 and sibling.drained == 700
    # the rows the run published (the default processor's per-key counts), as the launch that
    # ran it reported them (a sharing launch said 0 before migration 021)
    assert sibling.published_rows == first.published_rows == published_rows(drain) > 0
    assert _drained(drain) == {0: 140, 2: 560}  # 700 split 1:4 between the two levels only
    assert {lv.level for lv in sibling.levels} == {0, 2}
    assert set(first.phases) == {"plan", "spark_start", "spark_job", "commit", "mirror", "upkeep"}
    assert runs[0].phases == pytest.approx(first.phases, abs=0.002)


def test_run_for_other_levels_finishes_the_open_plan_first(make_drain, spark):
    drain = make_drain(budget=700, processor="spark_jobs.examples:one_row_per_record")
    for level in range(3):
        produce_records(drain, synthetic_records(300, seed=level), level=level)

    def crash(ctx):
        raise RuntimeError("executor died")

    with pytest.raises(RunFailed, match="Cause: RuntimeError: executor died"):
        drain_once(drain, crash, levels=[0, 1], trigger="test", settings=load_settings())
    open_plan = _runs(drain)[-1]
    assert open_plan.status == "failed" and list(open_plan.levels) == [0, 1]

    result = drain_job.run(drain, levels=[2], trigger="test", settings=load_settings())

    assert result.finished is not None and result.finished.run_id == open_plan.id
    assert [lv.level for lv in result.finished.levels] == [1, 0]
    assert result.finished.drained > 0
    assert [lv.level for lv in result.levels] == [2] and result.drained == 300
    assert not result.resumed and result.run_id != open_plan.id
    runs = _runs(drain)
    assert [(r.status, list(r.levels)) for r in runs] == [
        ("committed", [0, 1]),
        ("committed", [2]),
    ]
    # exactly once, record by record: every record below the committed offsets is in the sink
    # once, and nothing else is
    assert_each_record_once(drain)
    assert _drained(drain) == {
        0: result.finished.levels[1].drained,
        1: result.finished.levels[0].drained,
        2: 300,
    }
    assert sum(_drained(drain).values()) == 300 + min(700, 600)


def test_resuming_the_same_levels_stays_one_run(make_drain, spark):
    drain = make_drain()
    produce_records(drain, synthetic_records(200), level=1)

    def crash(ctx):
        raise RuntimeError("executor died")

    with pytest.raises(RunFailed):
        drain_once(drain, crash, levels=[1], trigger="test", settings=load_settings())
    result = drain_job.run(
        drain, levels=[1], trigger="test", launch_key="k1", settings=load_settings()
    )
    assert result.resumed and result.finished is None and result.drained == 200
    assert [(r.status, r.launch_key) for r in _runs(drain)] == [("committed", "k1")]


def test_a_launch_whose_plan_was_abandoned_plans_anew(make_drain, spark):
    """Before: the abandoned run kept the key, and the next launch of that backfill failed with
    an IntegrityError (runs_one_run_per_launch) when it claimed the key for its new plan."""
    from drainer.lifecycle.abandon import abandon_plan

    drain = make_drain()
    produce_records(drain, synthetic_records(200), level=1)

    def crash(ctx):
        raise RuntimeError("executor died")

    with pytest.raises(RunFailed):
        drain_once(
            drain,
            crash,
            levels=[1],
            trigger="test",
            launch_key="backfill:b1",
            settings=load_settings(),
        )
    abandon_plan(drain, "the processor had a bug", load_settings())
    result = drain_job.run(
        drain, levels=[1], trigger="test", launch_key="backfill:b1", settings=load_settings()
    )
    assert not result.shared and not result.resumed and result.drained == 200
    assert [(r.status, r.launch_key) for r in _runs(drain)] == [
        ("abandoned", "backfill:b1"),  # the audit keeps which launch it was
        ("committed", "backfill:b1"),
    ]
    # a sibling launch of the same backfill reports the new run, not the abandoned one
    sibling = drain_job.run(
        drain, levels=[1], trigger="test", launch_key="backfill:b1", settings=load_settings()
    )
    assert sibling.shared and sibling.run_id == result.run_id
