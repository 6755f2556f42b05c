"""Issue 2 acceptance on the real stack: produce at 3 levels, one Dagster run, exact results."""

from __future__ import annotations

import subprocess
import sys

import pytest
from lifecycle_helpers import assert_each_record_once, sink_records
from offsets import high_watermarks, level_watermarks, mirrored_offsets
from sqlalchemy import text

from drainer.config import ConfigError, load_drains
from drainer.kafka.producer import synthetic_records
from drainer.settings import load_settings
from tests.support.stack import get_engine, produce_records

PRODUCED = {0: 1200, 1: 800, 2: 500}


def test_dagster_run_drains_all_levels_exactly(make_drain, materialize_levels):
    drain = make_drain(processor="spark_jobs.examples:one_row_per_record")  # a row per record
    for level, count in PRODUCED.items():
        produce_records(drain, synthetic_records(count, keys=7, seed=level), level=level)

    metadata = materialize_levels(drain, [0, 1, 2])
    assert metadata["drained"] == sum(PRODUCED.values())
    for level, count in PRODUCED.items():
        assert metadata[f"level_{level}_drained"] == count
        assert metadata[f"level_{level}_backlog_after"] == 0

    # sink: every record once, by (topic, partition, offset), up to the end offsets
    assert_each_record_once(drain, high_watermarks(drain))

    # committed offsets in Postgres and the Kafka group offsets both equal the end offsets
    marks = level_watermarks(drain, range(3))
    with get_engine().connect() as conn:
        stored = {
            (r.topic, r.partition): (r.committed, r.offset_map)
            for r in conn.execute(
                text(
                    "SELECT topic, partition, committed, offset_map FROM partition_offsets WHERE drain = :d"
                ),
                {"d": drain.name},
            )
        }
    expected = {(drain.level_topic(lvl), p): wm.high for (lvl, p), wm in marks.items()}
    assert {k: v[0] for k, v in stored.items()} == expected
    assert all(offset_map == "" for _, offset_map in stored.values())
    for level in range(3):
        keys = [k for k in expected if k[0] == drain.level_topic(level)]
        mirrored = mirrored_offsets(drain, level, keys)
        assert {k: v[0] for k, v in mirrored.items()} == {k: expected[k] for k in keys}

    # a second run with nothing new drains nothing and changes nothing
    again = materialize_levels(drain, [0, 1, 2])
    assert again["drained"] == 0
    assert_each_record_once(drain, high_watermarks(drain))

    # new records only: the next run drains just those
    produce_records(drain, synthetic_records(300, keys=7, seed=9), level=1)
    third = materialize_levels(drain, [0, 1, 2])
    assert third["drained"] == 300
    assert third["level_1_drained"] == 300
    assert_each_record_once(drain, high_watermarks(drain))
    assert sum(sink_records(drain).values()) == 1200 + 1100 + 500


def test_unknown_level_is_a_clear_error(make_drain):
    drain = make_drain()
    with pytest.raises(ConfigError, match=r"levels 0\.\.2; level 5 does not exist"):
        produce_records(drain, synthetic_records(1), level=5)
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_jobs.cli",
            "produce",
            drain.name,
            "--level",
            "3",
            "--count",
            "1",
        ],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 2
    assert "level 3 does not exist" in cli.stderr
    # nothing was sent to any level
    marks = level_watermarks(drain, range(3))
    assert all(wm.high == 0 for wm in marks.values())


def test_invalid_config_names_the_setting(tmp_path, monkeypatch):
    bad = tmp_path / "drains.yaml"
    bad.write_text(
        "drains:\n  orders:\n    topic: orders\n    group: g\n    levels: 3\n    budget: 5\n"
        "    sink: {table: out}\n"
    )
    with pytest.raises(ConfigError, match=r"budget 5 is too small.*budget >= 7"):
        load_drains(bad)
    bad.write_text(
        "drains:\n  orders:\n    topic: orders-x\n    group: g\n    levels: 3\n    budget: 70\n"
        "    sink: {table: out}\n    ordering: sideways\n"
    )
    with pytest.raises(ConfigError) as info:
        load_drains(bad)
    assert "orders.topic" in str(info.value) and "orders.ordering" in str(info.value)
    monkeypatch.setenv("DRAINER_CONFIG", str(bad))
    cli = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "plan", "orders"], capture_output=True, text=True
    )
    assert cli.returncode == 2
    assert "orders.ordering" in cli.stderr


def test_a_small_read_of_more_ranges_than_cores_runs_in_as_many_tasks_as_cores(make_drain, spark):
    """12 small ranges on fewer cores: the dataframe read runs in `cores` tasks, not one per
    range (each task's start cost more than its reading); every record still lands once and
    the counts per partition stay exact."""
    from spark_jobs import drain_job
    from spark_jobs.session import cores

    drain = make_drain(
        levels=3, partitions=4, processor="tests.processors:with_read_task", budget=10_000
    )
    for level in range(3):
        produce_records(drain, synthetic_records(400, keys=7, seed=level), level=level)
    n = cores(spark) or 1
    if n >= 12:
        pytest.skip(f"{n} cores: 12 ranges are not more than the cores")
    result = drain_job.run(drain, settings=load_settings())
    assert result.drained == 1200
    assert_each_record_once(drain, high_watermarks(drain))
    with get_engine().connect() as conn:
        tasks = conn.execute(
            text(f'SELECT count(DISTINCT read_task) FROM "{drain.sink.table}"')
        ).scalar_one()
        read = conn.execute(
            text(
                "SELECT rr.topic, rr.partition, rr.read_records, rr.end_offset - rr.start_offset"
                " AS planned FROM run_ranges rr JOIN runs r ON r.id = rr.run_id"
                " WHERE r.drain = :d"
            ),
            {"d": drain.name},
        ).all()
    assert tasks == n
    assert len(read) == 12 and all(r.read_records == r.planned for r in read)
    assert sum(r.read_records for r in read) == 1200


def test_many_small_ranges_are_read_together_in_few_tasks_exactly_once(make_drain, spark):
    """48 ranges of 6,000 records (more records than a read of one task per core held before,
    and than the driver reads itself: `DRIVER_READ_MAX_RECORDS`): Spark's read runs in
    `coalesced_tasks` tasks, not one per range; every record lands once and the counts per
    partition stay exact."""
    from spark_jobs import drain_job
    from spark_jobs.driver_read import DRIVER_READ_MAX_RECORDS
    from spark_jobs.kafka_source import coalesced_tasks
    from spark_jobs.session import cores

    per_range = 6_000
    assert 48 * per_range > DRIVER_READ_MAX_RECORDS

    drain = make_drain(
        levels=3, partitions=16, processor="tests.processors:with_read_task", budget=500_000
    )
    for level in range(3):
        for partition in range(16):
            records = synthetic_records(per_range, keys=7, seed=partition)
            produce_records(drain, records, level=level, partition=partition)
    n = cores(spark) or 1
    expected = coalesced_tasks(48, 48 * per_range, n)
    if expected is None:
        pytest.skip(f"{n} cores: 48 ranges of {per_range:,} records are read one task each")
    result = drain_job.run(drain, settings=load_settings())
    assert result.drained == 48 * per_range
    assert_each_record_once(drain, high_watermarks(drain))
    with get_engine().connect() as conn:
        tasks = conn.execute(
            text(f'SELECT count(DISTINCT read_task) FROM "{drain.sink.table}"')
        ).scalar_one()
        read = conn.execute(
            text(
                "SELECT rr.read_records, rr.end_offset - rr.start_offset AS planned"
                " FROM run_ranges rr JOIN runs r ON r.id = rr.run_id WHERE r.drain = :d"
            ),
            {"d": drain.name},
        ).all()
    assert tasks == expected < 48
    assert len(read) == 48 and all(r.read_records == r.planned for r in read)


def test_a_plan_of_fewer_ranges_than_cores_is_read_in_split_tasks_exactly_once(make_drain, spark):
    """One partition per level and more cores than ranges: the dataframe read splits each range
    into several Spark tasks (Kafka's minPartitions, issue 30); every record still lands once and
    the read's counts per partition are exact."""
    from spark_jobs import drain_job
    from spark_jobs.session import cores

    drain = make_drain(
        levels=1, partitions=1, processor="spark_jobs.examples:one_row_per_record", budget=10_000
    )
    produce_records(drain, synthetic_records(5000, keys=7, seed=3), level=0)
    assert (cores(spark) or 1) > 1, "this machine's local Spark has one core: nothing to split"
    result = drain_job.run(drain, settings=load_settings())
    assert result.drained == 5000
    assert_each_record_once(drain, high_watermarks(drain))
    with get_engine().connect() as conn:
        read = conn.execute(
            text(
                "SELECT rr.read_records, rr.read_bytes FROM run_ranges rr"
                " JOIN runs r ON r.id = rr.run_id WHERE r.drain = :d"
            ),
            {"d": drain.name},
        ).one()
    # counted above the processor, which keeps one row per record: bytes are not measured
    assert read.read_records == 5000 and read.read_bytes is None


def test_kafka_is_read_through_the_v2_scan_with_each_records_level(make_drain, spark):
    """drainer's session reads Kafka through the V2 scan (no external-row round trip per
    record, spark_jobs.session.v2_reads), and each record's level is its topic's suffix."""
    import contextlib
    import io

    from drainer.settings import load_settings
    from drainer.store.runs import StoredRange
    from spark_jobs.kafka_source import read_ranges

    drain = make_drain(levels=3, partitions=1)
    for level, count in ((0, 5), (2, 30)):
        produce_records(drain, synthetic_records(count, keys=3), level=level)
    ranges = [
        StoredRange(drain.level_topic(level), level, part, 0, wm.high, "", wm.high)
        for (level, part), wm in level_watermarks(drain, [0, 2]).items()
    ]
    df = read_ranges(
        spark, drain, load_settings().bootstrap_servers, ranges, home=load_settings().home
    )
    plan = io.StringIO()
    with contextlib.redirect_stdout(plan):  # explain prints, on Connect and in-process alike
        df.explain()
    assert "BatchScan KafkaTable" in plan.getvalue(), plan.getvalue()
    levels = df.groupBy("level").count().orderBy("level").collect()
    assert [(r["level"], r["count"]) for r in levels] == [(0, 5), (2, 30)]
