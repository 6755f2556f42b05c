"""Issue 17 on the real stack: drains into Delta Lake and Iceberg tables, exactly once.

The tables are read back without Spark: Delta with `deltalake` (delta-rs), Iceberg with
`pyiceberg` (its SQL catalog on the drainer's own Postgres, where Iceberg's JDBC catalog lives).
Every output row names its (topic, partition, offset), so "exactly once" is checked record by
record. Crashes are real `drainer run` processes that exit 86 at an injected point.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from offsets import high_watermarks, kafka_offsets, stored_offsets
from sqlalchemy import text
from test_exactly_once import (
    RECORD_MODE,
    cli_run,
    committed_drained,
    drain_until_empty,
    produce_backlog,
    runs_of,
)

from dagster_project.metadata import run_metadata
from drainer import faults
from drainer.config import DrainConfig
from drainer.errors import ConfigError
from drainer.observe.status import drain_status
from drainer.settings import load_settings
from spark_jobs import drain_job
from spark_jobs.sinks import spark_sink_for
from tests.support.stack import get_engine, produce_records

pytestmark = pytest.mark.slow

PER_PARTITION = {0: 150, 1: 100, 2: 50}  # 3 levels x 2 partitions: 600 records
BUDGET = 400  # less than the backlog: a crashed plan is followed by a fresh one
DATAFRAME_MODE = {"mode": "dataframe", "processor": "spark_jobs.examples:one_row_per_record"}
MODES = {"record": RECORD_MODE, "dataframe": DATAFRAME_MODE}


def sink_of(fmt: str) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    if fmt == "delta":
        return {"type": "delta", "path": f"events_{suffix}"}
    return {"type": "iceberg", "table": f"drains.events_{suffix}"}


def table_arrow(drain: DrainConfig):
    """The sink table as an Arrow table, read without Spark."""
    settings = load_settings()
    if drain.sink.type == "delta":
        from deltalake import DeltaTable

        return DeltaTable(
            str(Path(settings.warehouse) / (drain.sink.path or ""))
        ).to_pyarrow_table()
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("drainer", uri=settings.database_url)
    return catalog.load_table(drain.sink.table).scan().to_arrow()


def table_offsets(drain: DrainConfig) -> Counter:
    rows = table_arrow(drain).select(["topic", "partition", "offset"]).to_pylist()
    return Counter((r["topic"], r["partition"], r["offset"]) for r in rows)


def assert_each_record_once(drain: DrainConfig, total: int) -> None:
    seen = table_offsets(drain)
    high = high_watermarks(drain)
    assert sum(high.values()) == total
    expected = {(t, p, o) for (t, p), end in high.items() for o in range(end)}
    twice = {k: n for k, n in seen.items() if n > 1}
    assert not twice, f"{len(twice)} records in the table more than once, e.g. {list(twice)[:5]}"
    missing = expected - set(seen)
    assert not missing, f"{len(missing)} records missing from the table, e.g. {sorted(missing)[:5]}"
    assert set(seen) == expected
    # Postgres and the Kafka mirror at the end offsets; every record counted once
    assert stored_offsets(drain) == {k: (end, "") for k, end in high.items()}
    assert {k: v[0] for k, v in kafka_offsets(drain).items()} == high
    assert committed_drained(drain) == total
    assert all(r.status == "committed" for r in runs_of(drain))


def table_run_ids(drain: DrainConfig) -> list[int]:
    """The run ids the table's commits carry, oldest first (read without Spark)."""
    settings = load_settings()
    if drain.sink.type == "delta":
        import json

        from deltalake import DeltaTable

        history = DeltaTable(str(Path(settings.warehouse) / (drain.sink.path or ""))).history()
        return [
            json.loads(h["userMetadata"])["drainer.run-id"]
            for h in reversed(history)
            if h.get("userMetadata")
        ]
    from pyiceberg.catalog.sql import SqlCatalog

    # what a reader sees is main's line of snapshots: a run's branch and staged writes are not
    table = SqlCatalog("drainer", uri=settings.database_url).load_table(drain.sink.table)
    line, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        line.append(snapshot.summary.additional_properties if snapshot.summary else {})
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    waps = [p.get("wap.id") or p.get("published-wap-id") for p in reversed(line)]
    # drainer:<drain>:<run id>[:<run nonce>]
    return [int(wap.split(":")[2]) for wap in waps if wap and wap.startswith("drainer:")]


def current_version(drain: DrainConfig) -> int:
    """The table's latest Delta version or current Iceberg snapshot (read without Spark)."""
    settings = load_settings()
    if drain.sink.type == "delta":
        from deltalake import DeltaTable

        return DeltaTable(str(Path(settings.warehouse) / (drain.sink.path or ""))).version()
    from pyiceberg.catalog.sql import SqlCatalog

    table = SqlCatalog("drainer", uri=settings.database_url).load_table(drain.sink.table)
    return table.current_snapshot().snapshot_id


@pytest.mark.parametrize("mode", ["dataframe", "record"])
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_drained_rows_read_back_without_spark(make_drain, lakehouse, fmt, mode):
    drain = make_drain(sink=sink_of(fmt), budget=BUDGET, **MODES[mode])
    total = sum(produce_backlog(drain, PER_PARTITION).values())
    results = drain_until_empty(drain)
    assert sum(r.drained for r in results) == total and len(results) == 2
    assert_each_record_once(drain, total)
    # one table commit per run, each tagged with its run
    assert table_run_ids(drain) == [r.run_id for r in results]
    # the run's result, `drainer status` and Dagster's metadata name the commit it made
    report = drain_status(drain, load_settings())
    assert report["sink"]["type"] == fmt
    by_run = {r["id"]: r["table_commit"] for r in report["runs"]}
    for result in results:
        commit = by_run[result.run_id]
        assert commit == result.table_commit
        assert commit["format"] == fmt and commit["rows_added"] == result.drained
        assert commit["files_added"] > 0 and commit["bytes_added"] > 0
    # the version a run names is the one its commit made: the last run's is the table's head
    assert results[-1].table_commit["version"] == current_version(drain)
    metadata = run_metadata(results[-1])
    assert metadata["table_version"].value == results[-1].table_commit["version"]
    assert metadata["table_files_added"].value == results[-1].table_commit["files_added"]


@pytest.mark.parametrize("point", faults.TABLE_POINTS)
@pytest.mark.parametrize("mode", ["dataframe", "record"])
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_crash_then_resume_is_exactly_once(make_drain, lakehouse, fmt, mode, point):
    drain = make_drain(sink=sink_of(fmt), budget=BUDGET, **MODES[mode])
    total = sum(produce_backlog(drain, PER_PARTITION).values())

    crashed = cli_run(drain, point)
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    assert f"injected fault at {point}" in crashed.stderr
    (run,) = runs_of(drain)
    committed_to_table = point in ("after_table_commit", "after_commit")
    if committed_to_table:
        assert table_run_ids(drain) == [run.id]
    elif point == "after_plan":
        assert table_exists(drain) is False or table_run_ids(drain) == []
    else:  # during_spark: the Connect server may finish the dead client's write, or not
        assert table_exists(drain) is False or table_run_ids(drain) in ([], [run.id])
    assert run.status == {
        "after_plan": "planned",
        "after_commit": "committed",
    }.get(point, "running")

    results = drain_until_empty(drain)
    first = results[0]
    if point == "after_commit":
        assert not first.resumed and first.run_id != run.id
    else:
        assert first.resumed and first.run_id == run.id and first.drained == BUDGET
    # the resumed run never wrote twice: one commit per run in the table
    assert table_run_ids(drain) == sorted({run.id, *(r.run_id for r in results)})
    assert_each_record_once(drain, total)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_two_attempts_writing_one_run_at_once_land_once(make_drain, lakehouse, fmt):
    """A resumed run racing its crashed attempt's write, which the Connect server finished for
    the dead client (two Delta writers both creating the table, two Iceberg appends of one
    run). The table must hold the run once, whoever commits first."""
    from drainer.sinks import sink_for
    from spark_jobs.session import get_spark

    drain = make_drain(sink=sink_of(fmt), budget=BUDGET, **DATAFRAME_MODE)
    settings = load_settings()
    sink = spark_sink_for(drain.sink, settings)
    # the session a run of this drain gets: made with its sink's settings (its catalog), not
    # whichever session the process made first
    spark = get_spark(settings, check=True, sink_conf=sink_for(drain.sink, settings).session_conf())
    sink.prepare(spark, drain.name)
    run_id = 10_000_000 + uuid.uuid4().int % 1_000_000
    # what a table sink's write reads of the run's context: the drain, the run, the attempt
    run = SimpleNamespace(id=run_id, nonce=uuid.uuid4().hex, planned_at=None)
    ctx: Any = SimpleNamespace(drain=drain, run=run, attempt=1)
    rows = spark.range(2_000).selectExpr("'t' AS topic", "0 AS partition", "id AS offset")
    start = threading.Barrier(3)
    commits: list[Any] = []
    spans: list[tuple[float, float]] = []

    def attempt() -> None:
        start.wait()
        began = time.monotonic()
        commits.append(sink.write(spark, ctx, rows))
        spans.append((began, time.monotonic()))

    threads = [threading.Thread(target=attempt) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert len(commits) == 3, "an attempt failed instead of finding the run's commit"
    # the race happened: every attempt began its write before any attempt's write returned
    assert max(b for b, _ in spans) < min(e for _, e in spans), spans
    assert {c.id for c in commits} == {commits[0].id}  # all name the one commit
    assert table_run_ids(drain) == [run_id]
    assert table_arrow(drain).num_rows == 2_000
    # and a later attempt of the run finds the commit instead of writing
    assert sink.committed(spark, ctx) == commits[0]


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_later_attempts_commit_names_that_attempt(make_drain, lakehouse, fmt):
    """The commit of a run's third attempt says attempt 3: the run's dead letters are the
    failures its landed attempt staged (`failures_attempt`). Before: a Delta append's retry
    loop reused the name `attempt`, and its commit said attempt 1 on a first try."""
    from drainer.sinks import sink_for
    from spark_jobs.session import get_spark

    drain = make_drain(sink=sink_of(fmt), budget=BUDGET, **DATAFRAME_MODE)
    settings = load_settings()
    sink = spark_sink_for(drain.sink, settings)
    spark = get_spark(settings, check=True, sink_conf=sink_for(drain.sink, settings).session_conf())
    sink.prepare(spark, drain.name)
    run = SimpleNamespace(id=20_000_000 + uuid.uuid4().int % 1_000_000, nonce=uuid.uuid4().hex)
    ctx: Any = SimpleNamespace(drain=drain, run=run, attempt=3)
    rows = spark.range(10).selectExpr("'t' AS topic", "0 AS partition", "id AS offset")
    commit = sink.write(spark, ctx, rows)
    assert commit.attempt == 3
    assert sink.committed(spark, ctx).attempt == 3


def table_exists(drain: DrainConfig) -> bool:
    settings = load_settings()
    if drain.sink.type == "delta":
        log_dir = Path(settings.warehouse) / (drain.sink.path or "") / "_delta_log"
        return any(log_dir.glob("*.json"))  # a commit, not only a folder Delta prepared
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("drainer", uri=settings.database_url).table_exists(drain.sink.table)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_new_column_is_added_and_a_type_change_is_refused(make_drain, lakehouse, fmt):
    drain = make_drain(sink=sink_of(fmt), budget=300, **DATAFRAME_MODE)
    produce_backlog(drain, PER_PARTITION)
    first = drain_job.run(drain, trigger="test", settings=load_settings())
    assert first.drained == 300
    wider = drain.model_copy(update={"processor": "tests.processors:one_row_with_value"})
    second = drain_job.run(wider, trigger="test", settings=load_settings())
    assert second.drained == 300
    table = table_arrow(drain)
    assert "value_text" in table.column_names
    values = table.select(["offset", "value_text"]).to_pylist()
    assert sum(1 for v in values if v["value_text"] is not None) == 300  # the second run's rows

    produce_backlog(drain, {0: 10})
    before = stored_offsets(drain)
    changed = drain.model_copy(update={"processor": "tests.processors:value_size_as_text"})
    with pytest.raises(ConfigError, match="output column value_size is string") as info:
        drain_job.run(changed, trigger="test", settings=load_settings())
    assert "stores it as int" in str(info.value)
    assert stored_offsets(drain) == before  # nothing committed
    assert table_arrow(drain).num_rows == 600


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_maintain_compacts_small_files_and_keeps_every_row(make_drain, lakehouse, fmt):
    from spark_jobs.session import get_spark
    from spark_jobs.sinks.delta import LISTING_PARALLELISM
    from spark_jobs.table_maintenance import maintain

    # six runs: a small run writes a file per core, and Iceberg's rewrite leaves a group of
    # fewer than five files alone (its `min-input-files`)
    drain = make_drain(sink=sink_of(fmt), budget=100, **DATAFRAME_MODE)
    total = sum(produce_backlog(drain, PER_PARTITION).values())
    drain_until_empty(drain)
    with pytest.raises(ConfigError, match="below 7 days"):
        maintain(drain, retention_hours=1, settings=load_settings())
    session = get_spark(load_settings())  # the session maintain uses, shared with runs
    listing = session.conf.get(LISTING_PARALLELISM)
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    retention_check = session.conf.get(check, None)
    report = maintain(drain, retention_hours=0, force=True, settings=load_settings())
    # VACUUM's settings were its own session's: the one runs share never saw them
    assert session.conf.get(LISTING_PARALLELISM) == listing
    assert session.conf.get(check, None) == retention_check
    assert report["format"] == fmt and report["files_removed"] > 1
    assert report["files_added"] < report["files_removed"]
    assert_each_record_once(drain, total)
    assert live_files(drain) == report["files_added"]


def test_maintain_removes_an_interrupted_writes_orphan_files_past_a_safe_age(make_drain, lakehouse):
    """Before: the data files an interrupted Iceberg write left outside every snapshot stayed
    for good. `drainer maintain` removes those older than the retention and a day (a write
    in flight has younger ones), even with a forced retention of 0."""
    import os
    import time

    from spark_jobs.table_maintenance import maintain

    drain = make_drain(sink=sink_of("iceberg"), budget=100, **DATAFRAME_MODE)
    total = sum(produce_backlog(drain, {0: 20, 1: 10, 2: 10}).values())
    drain_until_empty(drain)
    folder = spark_sink_for(drain.sink, load_settings()).data_folder()
    assert folder is not None
    data = folder / "data"
    [written, *_] = sorted(data.rglob("*.parquet"))
    old, fresh = data / "00000-9-interrupted-old.parquet", data / "00000-9-in-flight.parquet"
    for orphan in (old, fresh):
        orphan.write_bytes(written.read_bytes())  # as a crashed task leaves them: never committed
    three_days_ago = time.time() - 3 * 86400
    os.utime(old, (three_days_ago, three_days_ago))
    report = maintain(drain, retention_hours=0, force=True, settings=load_settings())
    assert not old.exists() and fresh.exists()
    assert report["orphan_files_removed"] == 1
    assert_each_record_once(drain, total)


def test_settings_changed_in_a_session_of_its_own_stay_there(spark):
    """What maintenance changes for its VACUUM (the retention check) stays in a clone of the
    session: the shared one is never changed and set back, which raced a concurrent maintain."""
    from spark_jobs.own_session import own_settings

    key = "spark.databricks.delta.retentionDurationCheck.enabled"
    shared = spark.conf.get(key, None)
    with own_settings(spark) as own:
        own.conf.set(key, "false")
        assert own.conf.get(key) == "false" and own.range(3).count() == 3
        assert spark.conf.get(key, None) == shared
    assert own.is_stopped and spark.range(2).count() == 2  # released; the shared one goes on


def test_a_kept_session_goes_from_lease_to_lease_with_only_the_run_sessions_settings(spark):
    """A MERGE's session (`own_settings(keep_for=...)`) stays on the server from one lease to
    the next, so the server compiles its queries' code once, not once per run. What a lease
    set (a run's Delta transaction) stays in it and is gone at the next lease; concurrent
    leases never share one; a lease that raised leaves its session to whatever it still runs."""
    from spark_jobs.own_session import own_settings

    key = "spark.databricks.delta.write.txnAppId"
    with own_settings(spark, keep_for="a test's work") as first:
        first.conf.set(key, "run 1")
        kept = first.session_id
        assert kept != spark.session_id and spark.conf.get(key, None) is None
        with own_settings(spark, keep_for="a test's work") as meanwhile:
            assert meanwhile.session_id not in (kept, spark.session_id)
            assert meanwhile.conf.get(key, None) is None
        assert first.range(3).count() == 3
    with own_settings(spark, keep_for="a test's work") as second:
        assert second.session_id == kept  # the same server session: its compiled code
        assert second.conf.get(key, None) is None  # run 1's transaction stayed behind
        for shared in ("spark.sql.shuffle.partitions", "spark.sql.session.timeZone"):
            assert second.conf.get(shared) == spark.conf.get(shared)
    with pytest.raises(ZeroDivisionError), own_settings(spark, keep_for="a test's work") as lost:
        raised_in = lost.session_id
        lost.range(1).collect()
        _ = 1 / 0
    with own_settings(spark, keep_for="a test's work") as after:
        assert after.session_id != raised_in and after.range(2).count() == 2
    assert spark.range(2).count() == 2


def live_files(drain: DrainConfig) -> int:
    """Data files the table's current version reads (read without Spark)."""
    settings = load_settings()
    if drain.sink.type == "delta":
        from deltalake import DeltaTable

        return len(DeltaTable(str(Path(settings.warehouse) / (drain.sink.path or ""))).file_uris())
    from pyiceberg.catalog.sql import SqlCatalog

    table = SqlCatalog("drainer", uri=settings.database_url).load_table(drain.sink.table)
    return len(list(table.scan().plan_files()))


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_resumed_plan_whose_ranges_retention_deleted_keeps_its_table_commit_once(
    make_drain, lakehouse, fmt
):
    """The lakehouse side of test_retention's resumed-plan test. A run wrote its table commit
    (99 rows; its poison record at offset 10 failed, staged in Postgres) and crashed before the
    Postgres commit; then retention deleted every planned record. The resumed run has nothing
    to read and writes nothing: the table holds the run once, the run's Postgres commit names
    that table commit, and the staged failure of a record retention deleted is lost, not failed.

    Before: the failure was counted against 0 records read, the run committed drained = -1,
    and `drainer status` of the drain raised "history of level 0 has a negative drained
    count: [-1]"; the run's table commit was not on record."""
    from lifecycle_helpers import cli, delete_records_before
    from test_retention import POISON_ECHO, _records

    drain = make_drain(sink=sink_of(fmt), levels=1, partitions=1, budget=1000, **POISON_ECHO)
    topic = drain.level_topic(0)
    produce_records(drain, _records(100, poison_at={10}), level=0, partition=0)
    crashed = cli("run", drain.name, fault="after_table_commit")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    (run,) = runs_of(drain)
    assert table_run_ids(drain) == [run.id]
    delete_records_before(drain, 0, 0, 100)  # retention takes every planned record

    proc = cli("run", drain.name, "--json")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [(r.id, r.status) for r in runs_of(drain)] == [(run.id, "committed")]
    assert table_run_ids(drain) == [run.id]  # not written a second time
    written = {(topic, 0, o) for o in range(100) if o != 10}
    assert table_offsets(drain) == Counter({key: 1 for key in written})
    status = drain_status(drain, load_settings())
    [stored] = [r for r in status["runs"] if r["id"] == run.id]
    assert stored["table_commit"] is not None, "the run's table commit is not on record"
    assert stored["table_commit"]["rows_added"] == 99
    # as with Postgres: the numbers count what this attempt read; the table commit tells what
    # the crashed one wrote
    assert (stored["drained"], stored["lost_to_retention"]) == (0, 100)
    assert stored_offsets(drain) == {(topic, 0): (100, "")}
    with get_engine().connect() as conn:
        attempts = conn.scalar(
            text("SELECT count(*) FROM record_attempts WHERE drain = :d"), {"d": drain.name}
        )
        dead = conn.scalar(
            text("SELECT count(*) FROM dead_letters WHERE drain = :d"), {"d": drain.name}
        )
    assert (attempts, dead) == (0, 0)  # offset 10 is among the 100 lost to retention
