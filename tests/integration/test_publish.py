"""Publishing a run's rows on the real stack: each run's stage table becomes its partition of
the target at commit (or is copied into a plain target), crashes and abandons leave no stray
rows, and a run without output leaves no partition."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from sqlalchemy import text

from drainer.config import DrainConfig
from drainer.errors import RunFailed
from drainer.kafka.producer import synthetic_records
from drainer.lifecycle.abandon import abandon_plan
from drainer.lifecycle.run import drain_once
from drainer.settings import load_settings
from drainer.store.sink_names import stage_name
from drainer.store.sink_tables import relkind
from spark_jobs import drain_job
from tests.support.stack import get_engine, produce_records

ONE_ROW = {"processor": "spark_jobs.examples:one_row_per_record"}


class Crash(RuntimeError):
    """The process dying between staging and commit, as far as the run can tell."""


def _stage_then_crash(drain: DrainConfig) -> int:
    """Run the drain's Spark job, then fail before the commit; returns the run's id."""
    seen: dict[str, int] = {}

    def stage_then_crash(ctx):
        drain_job.execute(ctx)
        seen["run"] = ctx.run.id
        raise Crash("the process died after staging")

    # the first attempt's failure is one RunFailed line, the crash its cause (issue 31)
    with pytest.raises(RunFailed) as failed:
        drain_once(drain, stage_then_crash, trigger="test", settings=load_settings())
    assert isinstance(failed.value.__cause__, Crash)
    return seen["run"]


def _drain(make_drain, publish: str = "attach", **overrides) -> DrainConfig:
    sink = {"table": f"sink_{uuid.uuid4().hex[:8]}", "publish": publish}
    return make_drain(levels=1, partitions=2, budget=100, sink=sink, **{**ONE_ROW, **overrides})


def _produce(drain: DrainConfig, per_partition: int) -> None:
    for partition in range(drain.partitions):
        records = synthetic_records(per_partition, keys=7, seed=partition)
        produce_records(drain, list(records), level=0, partition=partition)


def _kind(table: str) -> str | None:
    with get_engine().connect() as conn:
        return relkind(conn, table)


def _partitions(table: str) -> list[str]:
    with get_engine().connect() as conn:
        return sorted(
            conn.execute(
                text(
                    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = to_regclass(:t)"
                ),
                {"t": table},
            ).scalars()
        )


def _sink(drain: DrainConfig) -> Counter:
    """(partition, offset, run id) -> rows in the target."""
    with get_engine().connect() as conn:
        if _kind(drain.sink.table) is None:
            return Counter()
        rows = conn.execute(
            text(f'SELECT partition, "offset", _drainer_run_id FROM "{drain.sink.table}"')
        ).all()
    return Counter((r.partition, r.offset, r._drainer_run_id) for r in rows)


def _staged(drain: DrainConfig, run_id: int) -> int | None:
    """Rows in the run's stage table while it is a table of its own; None when it is not."""
    stage = stage_name(drain.sink.table, run_id)
    with get_engine().connect() as conn:
        standalone = conn.scalar(
            text("SELECT NOT relispartition FROM pg_class WHERE oid = to_regclass(:t)"),
            {"t": stage},
        )
        if not standalone:
            return None
        return conn.scalar(text(f'SELECT count(*) FROM "{stage}"'))


def _each_offset_once(sink: Counter, per_partition: int) -> dict[int, int]:
    """Asserts every offset of both partitions is in the sink once; returns rows per run."""
    assert all(n == 1 for n in sink.values()), [k for k, n in sink.items() if n > 1][:5]
    assert sorted((p, o) for p, o, _ in sink) == [
        (p, o) for p in range(2) for o in range(per_partition)
    ]
    return dict(Counter(run for _, _, run in sink))


def test_each_run_is_attached_as_its_own_partition(make_drain, spark):
    drain = _drain(make_drain)
    _produce(drain, 75)  # 150 records, budget 100: two runs
    first = drain_job.run(drain.name, trigger="test", settings=load_settings())
    second = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert (first.drained, second.drained) == (100, 50)
    assert (first.published_rows, second.published_rows) == (100, 50)

    table = drain.sink.table
    assert _kind(table) == "p"
    assert _partitions(table) == sorted(
        [stage_name(table, first.run_id), stage_name(table, second.run_id)]
    )
    assert _staged(drain, first.run_id) is None and _staged(drain, second.run_id) is None
    per_run = _each_offset_once(_sink(drain), 75)
    assert per_run == {first.run_id: 100, second.run_id: 50}


def test_publish_copy_keeps_a_plain_target(make_drain, spark):
    drain = _drain(make_drain, publish="copy")
    _produce(drain, 30)
    result = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert result.drained == result.published_rows == 60
    assert _kind(drain.sink.table) == "r"
    assert _kind(stage_name(drain.sink.table, result.run_id)) is None  # copied, then dropped
    assert _each_offset_once(_sink(drain), 30) == {result.run_id: 60}


@pytest.mark.parametrize("publish", ["attach", "copy"])
def test_a_crash_before_the_commit_is_resumed_without_duplicates(make_drain, spark, publish):
    drain = _drain(make_drain, publish=publish)
    _produce(drain, 40)
    run_id = _stage_then_crash(drain)
    assert _staged(drain, run_id) == 80  # left standing, unattached
    assert _sink(drain) == Counter() and _partitions(drain.sink.table) == []

    resumed = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert resumed.resumed and resumed.run_id == run_id and resumed.published_rows == 80
    assert _each_offset_once(_sink(drain), 40) == {run_id: 80}
    assert _staged(drain, run_id) is None


def test_abandoning_a_plan_drops_its_stage(make_drain, spark):
    drain = _drain(make_drain)
    _produce(drain, 20)
    run_id = _stage_then_crash(drain)
    assert _staged(drain, run_id) == 40
    abandon_plan(drain, "test: the plan cannot succeed", load_settings())
    assert _kind(stage_name(drain.sink.table, run_id)) is None
    assert _sink(drain) == Counter()

    fresh = drain_job.run(
        drain.name, trigger="test", settings=load_settings()
    )  # plans afresh, publishes once
    assert fresh.run_id != run_id and fresh.drained == 40
    assert _each_offset_once(_sink(drain), 20) == {fresh.run_id: 40}


@pytest.mark.parametrize("processor", ["no_rows", "nothing_kept"])
def test_a_run_without_output_leaves_no_partition(make_drain, spark, processor):
    # nothing_kept's constant-false filter prunes the read and its record count from the plan:
    # the run still reports every record it drained
    drain = _drain(make_drain, processor=f"tests.processors:{processor}")
    _produce(drain, 10)
    result = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert result.drained == 20 and result.published_rows == 0
    assert _kind(drain.sink.table) == "p"
    assert _partitions(drain.sink.table) == []
    assert _kind(stage_name(drain.sink.table, result.run_id)) is None
