"""Folding a sink target's run partitions on the real stack: the count stays bounded after any
number of runs, readers see the same rows (and go on reading while a fold copies), a crash
inside a fold changes nothing (the next fold does it once), and a fold that cannot get the
target from a long reader gives up and is done by the next run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from lifecycle_helpers import assert_each_record_once
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from drainer import faults
from drainer.config import DrainConfig
from drainer.kafka.producer import synthetic_records
from drainer.lifecycle.upkeep import maintain_drain
from drainer.settings import load_settings
from drainer.sinks import postgres_folds
from drainer.sinks.postgres_folds import FANOUT, fold_sink
from drainer.store import sink_partitions
from drainer.store.sink_names import stage_name
from spark_jobs import drain_job
from tests.support.stack import get_engine, produce_records

DRAINER = Path(sys.executable).with_name("drainer")
ONE_ROW = {"processor": "spark_jobs.examples:one_row_per_record"}


def _target_with_run_partitions(
    table: str, runs: int, rows_per_run: int = 3, strategy: str = "range"
) -> None:
    """A target as `publish: attach` leaves it after `runs` runs, made in one statement:
    by range as drainer makes targets now, or by LIST as earlier versions did."""
    bound = (
        "FOR VALUES FROM (%s) TO (%s)', '{t}_r' || r, r, r + 1)"
        if strategy == "range"
        else "FOR VALUES IN (%s)', '{t}_r' || r, r)"
    ).format(t=table)
    with get_engine().begin() as conn:
        conn.execute(
            text(
                f'CREATE TABLE "{table}" (partition integer, "offset" bigint, value text, '
                f"_drainer_run_id bigint NOT NULL) PARTITION BY {strategy.upper()} "
                "(_drainer_run_id)"
            )
        )
        conn.execute(text(f'CREATE INDEX ON "{table}" ("offset")'))
        conn.execute(
            text(
                "DO $$ DECLARE r int; BEGIN FOR r IN 1.." + str(runs) + " LOOP "
                f"EXECUTE format('CREATE TABLE %I (LIKE {table}, CHECK (_drainer_run_id = %s))', "
                f"'{table}_r' || r, r); "
                f"EXECUTE format('INSERT INTO %I SELECT 0, (%s - 1) * {rows_per_run} + g, "
                f"''v'', %s FROM generate_series(0, {rows_per_run - 1}) g', "
                f"'{table}_r' || r, r, r); "
                f"EXECUTE format('ALTER TABLE {table} ATTACH PARTITION %I {bound}; "
                "END LOOP; END $$"
            )
        )


def _rows(table: str, lock_timeout: str = "0") -> Counter:
    """(partition, offset, run id) -> rows, read through the target as a reader would.

    `lock_timeout`: a reader that would wait longer for a lock raises LockNotAvailable instead.
    """
    with get_engine().begin() as conn:  # SET LOCAL: the pooled connection keeps no setting
        conn.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
        rows = conn.execute(text(f'SELECT partition, "offset", _drainer_run_id FROM "{table}"'))
        return Counter((r.partition, r.offset, r._drainer_run_id) for r in rows)


def _partitions(table: str) -> list[str]:
    with get_engine().connect() as conn:
        return sorted(p.name for p in sink_partitions.partitions(conn, table))


def _drop(table: str) -> None:
    with get_engine().begin() as conn:
        conn.execute(text(f'DROP TABLE IF EXISTS "{table}" CASCADE'))


def _maintain(drain: DrainConfig, fault: str | None = None) -> subprocess.CompletedProcess:
    """`drainer maintain <drain> --json` as its own process, optionally crashing at `fault`."""
    env = {k: v for k, v in os.environ.items() if k != "DRAINER_FAULT"}
    if fault:
        env["DRAINER_FAULT"] = fault
    return subprocess.run(
        [str(DRAINER), "maintain", drain.name, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_two_thousand_list_partitions_of_an_earlier_version_fold_to_a_few_with_the_same_rows(
    stack,
):
    """The existing database of the issue: a LIST target with 2,000 run partitions, as earlier
    versions left it. LIST folds take it to 12 partitions, then one fold moves those into
    `<table>_runs`; readers
    query the same table and see the same rows, and a run's rows are still found by pruning."""
    table = f"fold_{uuid.uuid4().hex[:8]}"
    _target_with_run_partitions(table, 2000, strategy="list")
    try:
        before = _rows(table)
        assert len(_partitions(table)) == 2000 and len(before) == 6000
        report = fold_sink(get_engine(), table)
        # LIST folds first: 2000 = 3720 in base 8, 12 listed partitions after 284 folds; then
        # one fold moves those 12 into <table>_runs (so no list is left to scan against)
        assert (report.before, report.after, report.folds) == (2000, 1, 285)
        assert _partitions(table) == [f"{table}_runs_1_2000"]
        assert _rows(table) == before  # every row once, as readers saw it before
        again = fold_sink(get_engine(), table)
        assert again.folds == 0 and again.after == 1
        with get_engine().connect() as conn:  # pruning still finds one run's rows
            plan = conn.execute(
                text(f'EXPLAIN SELECT * FROM "{table}" WHERE _drainer_run_id = 1234')
            ).scalars()
            scanned = [line for line in plan if "Scan" in line]
        assert len(scanned) == 1 and f"{table}_runs_1_2000" in scanned[0]
    finally:
        _drop(table)


@pytest.mark.parametrize(
    ("strategy", "runs", "folds", "left"),
    [("range", 3 * FANOUT, 3, 3), ("list", 3 * FANOUT, 4, 1), ("list", FANOUT - 3, 1, 1)],
    ids=["range", "list-folds", "list-move"],
)
@pytest.mark.parametrize("point", faults.FOLD_POINTS)
def test_a_crash_inside_a_fold_changes_nothing_and_the_next_fold_does_it_once(
    make_drain, point, strategy, runs, folds, left
):
    """Range: 24 run partitions fold in 3 folds. An earlier version's LIST target: its 24
    listed partitions become 3 LIST folds, which one more fold moves into `<table>_runs`
    (the crash hits the first LIST fold); with 5, the crash hits that move itself."""
    drain = make_drain(levels=1, partitions=1, budget=10, **ONE_ROW)
    table = drain.sink.table
    _target_with_run_partitions(table, runs, strategy=strategy)
    before = _rows(table)
    parts = _partitions(table)

    crashed = _maintain(drain, point)
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    assert f"injected fault at {point}" in crashed.stderr
    assert _partitions(table) == parts  # the fold's transaction died with its process
    assert _rows(table) == before
    with get_engine().connect() as conn:  # not even the new partition's table is left
        assert (
            conn.scalar(
                text(
                    "SELECT count(*) FROM pg_class WHERE (relname LIKE :f OR relname LIKE :r) "
                    "AND relkind = 'r'"
                ),
                {"f": f"{table}\\_f%", "r": f"{table}\\_runs\\_%"},
            )
            == 0
        )

    done = _maintain(drain)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f'"folds": {folds}' in done.stdout
    assert len(_partitions(table)) == left
    assert _rows(table) == before
    assert all(n == 1 for n in _rows(table).values())


def _produce(drain: DrainConfig, records: int) -> None:
    produce_records(drain, list(synthetic_records(records, keys=5, seed=1)), level=0, partition=0)


def test_runs_fold_their_partitions_after_the_commit_and_readers_see_each_record_once(
    make_drain, spark
):
    runs = FANOUT + 2
    drain = make_drain(
        levels=1,
        partitions=1,
        budget=5,
        sink={"table": f"sink_{uuid.uuid4().hex[:8]}"},
        **ONE_ROW,
    )
    _produce(drain, 5 * runs)
    results = [
        drain_job.run(drain.name, trigger="test", settings=load_settings()) for _ in range(runs)
    ]
    assert [r.drained for r in results] == [5] * runs
    assert all(not r.warnings for r in results), [r.warnings for r in results]
    table = drain.sink.table
    first, last = results[0].run_id, results[FANOUT - 1].run_id
    tail = [stage_name(table, r.run_id) for r in results[FANOUT:]]
    assert _partitions(table) == sorted([f"{table}_runs_{first}_{last}", *tail])
    rows = _rows(table)
    assert sorted(o for _, o, _ in rows) == list(range(5 * runs))
    assert all(n == 1 for n in rows.values())
    assert (
        maintain_drain(drain, settings=load_settings()).sink.folds == 0
    )  # upkeep already did everything


def test_a_list_bound_cannot_hold_a_tier_four_fold_but_a_range_bound_can(stack):
    """Why targets are partitioned by range now: a LIST bound lives in the partition's pg_class
    row, which is not TOASTed, so 4,096 13-digit run ids do not fit ("row is too big") and an
    earlier version's folds had to stop at 512 runs; a range bound is two numbers."""
    table = f"bound_{uuid.uuid4().hex[:8]}"
    first, runs = 10**12, FANOUT**4
    try:
        with get_engine().begin() as conn:
            for strategy in ("LIST", "RANGE"):
                conn.execute(
                    text(
                        f'CREATE TABLE "{table}_{strategy}" (v int, _drainer_run_id bigint '
                        f"NOT NULL) PARTITION BY {strategy} (_drainer_run_id)"
                    )
                )
            conn.execute(text(f'CREATE TABLE "{table}_big" (LIKE "{table}_LIST")'))
            conn.execute(
                text(
                    f'ALTER TABLE "{table}_RANGE" ATTACH PARTITION "{table}_big" '
                    f"FOR VALUES FROM ({first}) TO ({first + runs})"
                )
            )
            conn.execute(text(f'ALTER TABLE "{table}_RANGE" DETACH PARTITION "{table}_big"'))
        ids = ", ".join(str(first + i) for i in range(runs))
        with (
            pytest.raises(OperationalError, match="row is too big"),
            get_engine().begin() as conn,
        ):
            conn.execute(
                text(
                    f'ALTER TABLE "{table}_LIST" ATTACH PARTITION "{table}_big" FOR VALUES IN ({ids})'
                )
            )
    finally:
        for suffix in ("LIST", "RANGE", "big"):
            _drop(f"{table}_{suffix}")


def _blocked_by(pid: int) -> list[int]:
    """The backends `pid` is waiting for a lock of ([] when it is not waiting)."""
    with get_engine().connect() as conn:
        return list(conn.scalar(text("SELECT pg_blocking_pids(:p)"), {"p": pid}))


def test_readers_go_on_while_a_fold_copies_and_see_each_row_once_throughout(stack):
    """A reader of the whole target during the copy is not blocked (its lock_timeout would fail
    it, and a blocked reader inside the fold's own checkpoint would never return); one that
    starts during the swap waits for the fold's commit, then sees the folded partition. Every
    read sees every row once: before, during the copy, during the swap, after."""
    table = f"fold_{uuid.uuid4().hex[:8]}"
    _target_with_run_partitions(table, FANOUT)
    seen: dict[str, Counter] = {}
    reader_pid: list[int] = []
    waited: list[bool] = []
    swap_reads: list[threading.Thread] = []
    try:
        before = _rows(table)
        assert len(before) == 3 * FANOUT and set(before.values()) == {1}

        def dashboard() -> None:  # on its own connection, as a reader's session would be
            with get_engine().connect() as conn:
                reader_pid.append(conn.scalar(text("SELECT pg_backend_pid()")))
                rows = conn.execute(
                    text(f'SELECT partition, "offset", _drainer_run_id FROM "{table}"')
                )
                seen["during_swap"] = Counter(
                    (r.partition, r.offset, r._drainer_run_id) for r in rows
                )

        def checkpoint(point: str) -> None:
            if point == "fold_copied":  # sources SHARE-locked, rows copied, nothing swapped
                seen["during_copy"] = _rows(table, lock_timeout="20s")
                with get_engine().begin() as conn:  # what a dashboard counts, per run
                    conn.execute(text("SET LOCAL lock_timeout = '20s'"))
                    per_run = conn.execute(
                        text(f'SELECT _drainer_run_id, count(*) FROM "{table}" GROUP BY 1')
                    ).all()
                assert sorted(tuple(r) for r in per_run) == [(r, 3) for r in range(1, FANOUT + 1)]
            if point == "fold_swapped":  # ACCESS EXCLUSIVE held until the fold commits
                thread = threading.Thread(target=dashboard)
                thread.start()
                swap_reads.append(thread)
                for _ in range(3000):  # until the reader waits on the fold (or has read)
                    if reader_pid and _blocked_by(reader_pid[0]):
                        waited.append(True)
                        break
                    if "during_swap" in seen:
                        break
                    time.sleep(0.01)

        report = fold_sink(get_engine(), table, checkpoint=checkpoint)
        swap_reads[0].join(timeout=60)
        assert report.folds == 1 and report.after == 1
        assert waited, "a reader during the catalog swap waits for the fold's commit"
        assert seen["during_copy"] == before
        assert seen["during_swap"] == before  # read after the commit, from the folded partition
        assert _rows(table) == before
        assert _partitions(table) == [f"{table}_runs_1_{FANOUT}"]
    finally:
        _drop(table)


def test_a_fold_gives_up_behind_a_long_reader_and_the_next_run_does_it(
    make_drain, spark, monkeypatch
):
    """A reader's open transaction holds the target: the run's commit still attaches (readers do
    not block it), its upkeep's fold waits `lock_timeout`, gives up with nothing changed and
    leaves a warning; once the reader is gone, the next run's upkeep folds."""
    monkeypatch.setattr(postgres_folds, "LOCK_TIMEOUT_S", 1.0)  # the mechanism, not the 5 s wait
    drain = make_drain(
        levels=1,
        partitions=1,
        budget=5,
        sink={"table": f"sink_{uuid.uuid4().hex[:8]}"},
        **ONE_ROW,
    )
    table = drain.sink.table
    _produce(drain, 15)
    first = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert first.drained == 5 and not first.warnings, first.warnings
    # FANOUT - 1 older (empty) run partitions, so the next run's attach makes a tier full
    with get_engine().begin() as conn:
        for run_id in range(1, FANOUT):
            name = f"{table}_old{run_id}"
            conn.execute(text(f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING ALL)'))
            conn.execute(
                text(
                    f'ALTER TABLE "{table}" ATTACH PARTITION "{name}" '
                    f"FOR VALUES FROM ({run_id}) TO ({run_id + 1})"
                )
            )
    engine = get_engine()
    reader = engine.connect()
    try:
        reader.begin()
        held = reader.scalar(text(f'SELECT count(*) FROM "{table}"'))  # locks until it ends
        assert held == 5
        second = drain_job.run(drain.name, trigger="test", settings=load_settings())
        assert second.drained == 5  # committed: attaching does not wait for readers
        assert len(second.warnings) == 1, second.warnings
        assert "keeping the drain bounded failed" in second.warnings[0]
        assert "lock timeout" in second.warnings[0]
        # nothing folded, nothing left of the attempt: all FANOUT + 1 run partitions
        parts = _partitions(table)
        assert len(parts) == FANOUT + 1
        assert not [p for p in parts if p.startswith(f"{table}_runs_")]
        assert (
            reader.scalar(
                text("SELECT count(*) FROM pg_class WHERE relname LIKE :f AND relkind = 'r'"),
                {"f": f"{table}\\_runs\\_%"},
            )
            == 0
        )
    finally:
        reader.rollback()
        reader.close()
    third = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert third.drained == 5 and not third.warnings, third.warnings
    assert _partitions(table) == sorted(
        [
            f"{table}_runs_1_{first.run_id}",
            stage_name(table, second.run_id),
            stage_name(table, third.run_id),
        ]
    )
    assert_each_record_once(drain)
