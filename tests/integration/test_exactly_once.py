"""Issue 4 acceptance on the real stack: crashes, concurrent runs and zombies never lose or
duplicate a record.

Each crash is a real `drainer run` process that exits 86 at an injected point
(DRAINER_FAULT); the runs that finish the work afterwards run in this process on the shared
Spark session. Every record-mode sink row names its (topic, partition, offset), so "exactly
once" is checked record by record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from lifecycle_helpers import assert_each_record_once, published_rows
from offsets import high_watermarks, kafka_offsets, states, stored_offsets
from sqlalchemy import text

from drainer import faults
from drainer.config import DrainConfig
from drainer.errors import FencedOut
from drainer.kafka.producer import OutRecord, synthetic_records
from drainer.lifecycle.commit import commit_run
from drainer.lifecycle.results import ExecutionResult
from drainer.lifecycle.run import RunResult, drain_once
from drainer.settings import load_settings
from drainer.store.leases import ensure_drain
from drainer.store.runs import get_run
from drainer.store.sink_names import stage_name
from spark_jobs import drain_job
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.stack import get_engine, produce_records

DRAINER = Path(sys.executable).with_name("drainer")
PER_PARTITION = {0: 600, 1: 500, 2: 400}  # 3 levels x 2 partitions: 3,000 records
BUDGET = 2000  # less than the backlog: the crashed plan is followed by a fresh one
RECORD_MODE = {
    "mode": "record",
    "handler": "spark_jobs.examples:record_echo",
    "output_schema": RECORD_ECHO_SCHEMA,
    "ordering": "key",
}
# one sink row per record, so exactly once is checked record by record in both modes
DATAFRAME_MODE = {"mode": "dataframe", "processor": "spark_jobs.examples:one_row_per_record"}


# ---------------------------------------------------------------- helpers


def produce_backlog(drain: DrainConfig, per_partition: dict[int, int] = PER_PARTITION) -> Counter:
    """Produce to every (level, partition); returns how many records each (level, key) got."""
    expected: Counter = Counter()
    for level, count in per_partition.items():
        for partition in range(drain.partitions):
            records = list(synthetic_records(count, keys=11, seed=level * 10 + partition))
            produce_records(drain, records, level=level, partition=partition)
            expected.update((level, r.key.decode()) for r in records)
    return expected


def cli_run(
    drain: DrainConfig, fault: str | None = None, *args: str
) -> subprocess.CompletedProcess:
    """`drainer run <drain> --json` as its own process (its own JVM), optionally with a fault."""
    env = {k: v for k, v in os.environ.items() if k != "DRAINER_FAULT"}
    if fault:
        env["DRAINER_FAULT"] = fault
    return subprocess.run(
        [str(DRAINER), "run", drain.name, "--json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{") :])


def backlog(drain: DrainConfig) -> int:
    return sum(p.backlog for p in states(drain, list(range(drain.levels))))


def drain_until_empty(drain: DrainConfig, max_runs: int = 6) -> list[RunResult]:
    results = []
    while backlog(drain) > 0:
        assert len(results) < max_runs, f"backlog still {backlog(drain)} after {max_runs} runs"
        results.append(drain_job.run(drain.name, trigger="test", settings=load_settings()))
    return results


def staged_rows(drain: DrainConfig, run_id: int) -> int:
    """Rows in the run's stage table (0 when it has none)."""
    stage = stage_name(drain.sink.table, run_id)
    with get_engine().connect() as conn:
        if conn.scalar(text("SELECT to_regclass(:t)"), {"t": stage}) is None:
            return 0
        return conn.scalar(text(f'SELECT count(*) FROM "{stage}"'))


def standalone_stages(drain: DrainConfig) -> list[str]:
    """Stage tables of the drain's runs that exist and are not (yet) partitions of the target."""
    names = [stage_name(drain.sink.table, r.id) for r in runs_of(drain)]
    with get_engine().connect() as conn:
        return (
            conn.execute(
                text(
                    "SELECT relname FROM pg_class WHERE relname = ANY(:names) AND relkind = 'r' "
                    "AND NOT relispartition"
                ),
                {"names": names},
            )
            .scalars()
            .all()
        )


def runs_of(drain: DrainConfig) -> list:
    with get_engine().connect() as conn:
        return conn.execute(
            text("SELECT id, status, attempts FROM runs WHERE drain = :d ORDER BY id"),
            {"d": drain.name},
        ).all()


def ranges_of(run_id: int) -> list[tuple]:
    with get_engine().connect() as conn:
        return conn.execute(
            text(
                "SELECT topic, partition, start_offset, end_offset, start_map, records "
                "FROM run_ranges WHERE run_id = :r ORDER BY topic, partition"
            ),
            {"r": run_id},
        ).all()


def assert_no_overlapping_ranges(drain: DrainConfig) -> None:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                "SELECT rr.topic, rr.partition, rr.start_offset, rr.end_offset, rr.run_id "
                "FROM run_ranges rr JOIN runs r ON r.id = rr.run_id "
                "WHERE r.drain = :d AND r.status = 'committed' "
                "ORDER BY rr.topic, rr.partition, rr.start_offset"
            ),
            {"d": drain.name},
        ).all()
    previous: dict[tuple[str, int], tuple[int, int]] = {}
    for r in rows:
        key = (r.topic, r.partition)
        if key in previous:
            end, run_id = previous[key]
            assert r.start_offset >= end, (
                f"{key}: run {r.run_id} starts at {r.start_offset}, inside run {run_id} "
                f"(ends at {end})"
            )
        previous[key] = (r.end_offset, r.run_id)


def assert_fully_drained(drain: DrainConfig, total: int) -> None:
    """Postgres and the Kafka mirror at the end offsets; stats count every record once."""
    high = high_watermarks(drain)
    assert sum(high.values()) == total
    assert stored_offsets(drain) == {k: (end, "") for k, end in high.items()}
    assert {k: v[0] for k, v in kafka_offsets(drain).items()} == high
    assert committed_drained(drain) == total
    assert standalone_stages(drain) == []  # every stage was attached (or dropped: no rows)
    assert all(r.status == "committed" for r in runs_of(drain))


def committed_drained(drain: DrainConfig) -> int:
    """Records the drain's committed runs count as drained."""
    with get_engine().connect() as conn:
        return conn.scalar(
            text(
                "SELECT sum(rl.drained) FROM run_levels rl JOIN runs r ON r.id = rl.run_id "
                "WHERE r.drain = :d AND r.status = 'committed'"
            ),
            {"d": drain.name},
        )


# ---------------------------------------------------------------- 1. crash at every point


@pytest.mark.parametrize("point", faults.POINTS)
@pytest.mark.parametrize("mode", ["record", "dataframe"])
def test_crash_then_resume_is_exactly_once(make_drain, spark, mode, point):
    drain = make_drain(budget=BUDGET, **(RECORD_MODE if mode == "record" else DATAFRAME_MODE))
    expected = produce_backlog(drain)
    total = sum(expected.values())

    crashed = cli_run(drain, point)
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    assert f"injected fault at {point}" in crashed.stderr
    (run,) = runs_of(drain)
    plan = ranges_of(run.id)
    assert sum(r.records for r in plan) == BUDGET
    published = published_rows(drain)
    staged = staged_rows(drain, run.id)
    if point == "after_plan":
        assert staged == 0  # died before reading anything
    elif point == "during_spark":
        assert staged > 0  # died while tasks were writing
    elif point == "after_staging":
        assert staged == BUDGET  # one row per planned record, all staged
    if point == "after_commit":
        assert run.status == "committed"
        assert published > 0
        # committed in Postgres, but the process died before mirroring to Kafka
        stored = stored_offsets(drain)
        mirrored = kafka_offsets(drain)
        assert any(stored[k][0] != mirrored[k][0] for k in stored)
    else:
        assert run.status == ("planned" if point == "after_plan" else "running")
        assert published == 0  # nothing reaches the target before the commit

    results = drain_until_empty(drain)
    first = results[0]
    if point == "after_commit":
        assert not first.resumed and first.run_id != run.id
        assert first.mirror.partitions > 0  # the next run mirrored what the crash left
    else:
        # the crashed plan is resumed with the same id and the same ranges, then a fresh one
        assert first.resumed and first.run_id == run.id
        assert first.drained == BUDGET
        # after_plan died before starting the plan, so only the resuming run executed it
        assert first.attempt == (1 if point == "after_plan" else 2)
        assert ranges_of(run.id) == plan
        assert len(results) == 2 and not results[1].resumed
    assert {r.id: r.attempts for r in runs_of(drain)}[run.id] == (
        1 if point in ("after_plan", "after_commit") else 2
    )

    assert_each_record_once(drain, high_watermarks(drain))
    assert_fully_drained(drain, total)
    assert_no_overlapping_ranges(drain)


# ---------------------------------------------------------------- 3. one run at a time


def test_a_second_run_is_refused_while_one_holds_the_drain(make_drain, spark):
    """Another process's `drainer run` meets a run in progress: exit 3, and nothing planned.

    The holder is this process, paused inside its Spark phase until the refusal is seen, so
    the overlap does not depend on how fast a run is.
    """
    drain = make_drain(**RECORD_MODE)
    total = sum(produce_backlog(drain).values())
    holding, refused = threading.Event(), threading.Event()

    def execute_after_the_refusal(ctx):
        holding.set()
        assert refused.wait(timeout=300)
        return drain_job.execute(ctx)

    results: list[RunResult] = []
    holder = threading.Thread(
        target=lambda: results.append(
            drain_once(drain, execute_after_the_refusal, settings=load_settings())
        )
    )
    holder.start()
    try:
        assert holding.wait(timeout=120)
        loser = cli_run(drain)
    finally:
        refused.set()
        holder.join(timeout=300)
    assert loser.returncode == 3, loser.stderr[-2000:]
    message = " ".join(loser.stderr.split())
    (held,) = runs_of(drain)  # the refused process planned nothing
    assert f"drain '{drain.name}' is already being run by another process" in message
    assert f"(run {held.id}, running since" in message
    assert "--wait SECONDS" in message
    assert results and results[0].drained == total
    assert_each_record_once(drain)
    assert_fully_drained(drain, total)


def test_the_busy_message_names_a_run_that_is_only_planned(make_drain, stack):
    """The holder may be between planning and starting its run (no start time yet)."""
    drain = make_drain(**RECORD_MODE)
    produce_backlog(drain)
    crashed = cli_run(drain, "after_plan")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    (planned,) = runs_of(drain)
    assert planned.status == "planned"
    with get_engine().connect() as holder:  # what a planning run holds
        holder.execute(
            text("SELECT pg_advisory_lock(hashtextextended('drainer:' || :n, 0))"),
            {"n": drain.name},
        )
        refused = cli_run(drain)
    assert refused.returncode == 3, refused.stderr[-2000:]
    message = " ".join(refused.stderr.split())
    assert f"(run {planned.id}, planned since" in message


def test_a_run_started_while_a_crashed_runs_lock_lingers_waits_for_it(make_drain, stack):
    """A crashed run's lock goes once Postgres has seen its connection close, which can take a
    moment on a busy machine: a resume started meanwhile exited busy (3). A refused run now
    tries a few seconds first. The lock here is let go only after the run was refused once."""
    drain = make_drain(**RECORD_MODE)
    total = sum(produce_backlog(drain).values())
    lock = "SELECT pg_advisory_lock(hashtextextended('drainer:' || :n, 0))"
    with get_engine().connect() as holder:  # what a dead run's lingering backend holds
        holder.execute(text(lock), {"n": drain.name})
        proc = subprocess.Popen(
            [str(DRAINER), "run", drain.name, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:  # ends when the process does: a run never refused fails below
            seen.append(line)
            if "is held by another run" in line:
                holder.execute(
                    text("SELECT pg_advisory_unlock(hashtextextended('drainer:' || :n, 0))"),
                    {"n": drain.name},
                )
                break
        out = "".join(seen) + proc.stdout.read()
    assert proc.wait(timeout=300) == 0, out[-3000:]
    assert "is held by another run" in out, "the run was never refused: no race happened"
    assert json.loads(out[out.index("{") :])["drained"] == total


def test_a_waiting_run_drains_nothing_twice(make_drain, stack):
    drain = make_drain(**RECORD_MODE)
    total = sum(produce_backlog(drain).values())

    procs = [
        subprocess.Popen(
            [str(DRAINER), "run", drain.name, "--json", "--wait", "180"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=400) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    drained = sorted(json.loads(out[out.index("{") :])["drained"] for out, _ in outs)
    assert drained == [0, total]  # the second waited for the first, then found nothing new
    assert_each_record_once(drain)
    assert_fully_drained(drain, total)
    assert_no_overlapping_ranges(drain)


# ---------------------------------------------------------------- 3. fencing


def _small_backlog(drain: DrainConfig) -> int:
    return sum(produce_backlog(drain, {2: 150}).values())


def test_superseded_run_cannot_commit(make_drain, spark):
    drain = make_drain(**RECORD_MODE)
    total = _small_backlog(drain)
    engine = get_engine()
    seen: dict = {}

    def execute_then_lose_the_drain(ctx):
        executed = drain_job.execute(ctx)
        seen["ctx"] = ctx
        # a newer run took the drain meanwhile (as after this one lost its lock): new fence
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE drains SET fence = fence + 1 WHERE name = :n"), {"n": drain.name}
            )
        return executed

    with pytest.raises(FencedOut, match="a newer run took over"):
        drain_once(drain, execute_then_lose_the_drain, trigger="test", settings=load_settings())

    ctx = seen["ctx"]
    assert staged_rows(drain, ctx.run.id) == total and published_rows(drain) == 0
    with engine.connect() as conn:
        stale_run = get_run(conn, ctx.run.id)
    assert stale_run.status == "failed"
    assert all(committed == 0 for committed, _ in stored_offsets(drain).values())

    # the commit itself, called directly with the stale lease, refuses too
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET status = 'running' WHERE id = :r"), {"r": ctx.run.id})
    with pytest.raises(FencedOut):
        commit_run(engine, ctx.lease, drain, ctx.sink, ctx.run, 0.0, ExecutionResult())
    with engine.connect() as conn:
        assert conn.scalar(text(f'SELECT count(*) FROM "{drain.sink.table}"')) == 0
    assert all(committed == 0 for committed, _ in stored_offsets(drain).values())

    # the next run resumes the plan and commits it once
    result = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert result.resumed and result.run_id == ctx.run.id and result.attempt == 2
    assert result.drained == total
    assert_each_record_once(drain)
    assert_fully_drained(drain, total)


def _lock_holder(drain: DrainConfig) -> int:
    with get_engine().connect() as conn:
        return conn.scalar(
            text(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = "
                "hashtextextended('drainer:' || :n, 0)"
            ),
            {"n": drain.name},
        )


def test_zombie_run_cannot_touch_the_run_that_took_over(make_drain, spark):
    """Run A loses its lock connection mid-run; run B takes the drain and resumes A's plan.

    A, still running (a zombie), must neither wipe B's staged results, nor mark the plan
    failed under B, nor commit: B commits every record exactly once.
    """
    drain = make_drain(**RECORD_MODE)
    total = _small_backlog(drain)
    engine = get_engine()
    b_staged, a_done = threading.Event(), threading.Event()
    outcome: dict = {}

    def execute_b(ctx):
        outcome["b_fence"] = ctx.lease.fence
        executed = drain_job.execute(ctx)
        b_staged.set()
        assert a_done.wait(180)  # B commits only after the zombie did its worst
        return executed

    def run_b():
        try:
            outcome["b"] = drain_once(
                drain, execute_b, trigger="test", wait_s=60, settings=load_settings()
            )
        except BaseException as err:
            outcome["b"] = err

    def execute_a(ctx):
        outcome["a_run"] = ctx.run.id
        outcome["a_fence"] = ctx.lease.fence
        with engine.connect() as conn:  # the network drops A's lock connection
            assert conn.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": _lock_holder(drain)})
        thread_b = threading.Thread(target=run_b, name="run-b")
        thread_b.start()
        outcome["thread_b"] = thread_b
        assert b_staged.wait(180), outcome.get("b")
        try:
            drain_job.execute(ctx)  # the zombie carries on with the plan B now owns
        finally:
            a_done.set()

    with pytest.raises(FencedOut, match="a newer run took over"):
        drain_once(drain, execute_a, trigger="test", settings=load_settings())
    outcome["thread_b"].join(180)

    b = outcome["b"]
    assert isinstance(b, RunResult), b
    assert b.resumed and b.run_id == outcome["a_run"] and b.attempt == 2
    assert outcome["b_fence"] > outcome["a_fence"]
    assert b.drained == total and b.published_rows == total
    assert_each_record_once(drain)
    assert_fully_drained(drain, total)


def test_task_writes_hold_off_a_takeover_and_are_refused_after_it(make_drain, stack):
    """The check each Spark task makes before staging (drainer.store.leases.check_fence)."""
    import psycopg

    from drainer.settings import load_settings, psycopg_url
    from drainer.store.leases import Lease, check_fence

    drain = make_drain(**RECORD_MODE)
    engine = get_engine()
    ensure_drain(engine, drain.row())
    with engine.connect() as conn:
        fence = conn.scalar(text("SELECT fence FROM drains WHERE name = :n"), {"n": drain.name})
    url = psycopg_url(load_settings().database_url)
    bumped = threading.Event()
    taker_pid: list[int] = []

    def take_over() -> None:  # what a new lease does
        with engine.begin() as conn:
            taker_pid.append(conn.scalar(text("SELECT pg_backend_pid()")))
            conn.execute(
                text("UPDATE drains SET fence = fence + 1 WHERE name = :n"), {"n": drain.name}
            )
        bumped.set()

    with psycopg.connect(url) as task:
        check_fence(task, Lease(drain.name, fence), shared=True)  # a task of the run, mid-write
        taker = threading.Thread(target=take_over)
        taker.start()
        # the race happened: the takeover's own session waits for the lock the task holds
        assert _blocked_by(taker_pid, task.info.backend_pid, timeout_s=30)
        assert not bumped.is_set()
    taker.join(10)
    assert bumped.is_set()
    with psycopg.connect(url) as task, pytest.raises(FencedOut, match="a newer run took over"):
        check_fence(task, Lease(drain.name, fence), shared=True)  # the old run's next task


def _blocked_by(blocked: list[int], holder: int, timeout_s: float) -> bool:
    """True once the session whose pid `blocked` comes to hold waits on a lock `holder`'s
    session holds (`pg_blocking_pids` of that one session, not any waiter in the database)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if blocked:
            with get_engine().connect() as conn:
                blockers = conn.scalar(text("SELECT pg_blocking_pids(:p)"), {"p": blocked[0]})
                if holder in blockers:
                    return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------- 4. the Kafka mirror


def test_mirror_sends_the_offset_map_only_when_it_fits(make_drain, stack):
    import random

    from drainer.kafka.session import KafkaSession
    from drainer.lifecycle.mirror import mirror_offsets
    from drainer.offset_map import MAX_KAFKA_METADATA, decode_offset_map, encode_offset_map

    drain = make_drain(levels=1, budget=10)
    produce_records(drain, [OutRecord(b"x")] * 10, level=0, partition=0)
    rng = random.Random(4)
    small = encode_offset_map(100, {105, 107, 200})
    # half of 60,000 offsets done at random: no encoding squeezes that into 4,096 characters
    big_done = {100 + i for i in range(1, 60_000) if rng.random() < 0.5}
    big = encode_offset_map(100, big_done)
    assert len(small) <= MAX_KAFKA_METADATA < len(big)
    topic = drain.level_topic(0)
    engine = get_engine()
    ensure_drain(engine, drain.row())
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO partition_offsets (drain, topic, level, partition, committed, "
                "offset_map) VALUES (:d, :t, 0, 0, 100, :small), (:d, :t, 0, 1, 100, :big)"
            ),
            {"d": drain.name, "t": topic, "small": small, "big": big},
        )

    with KafkaSession(drain, load_settings()) as kafka:
        report = mirror_offsets(engine, drain, kafka)
    assert (report.partitions, report.maps_dropped, report.error) == (2, 1, None)
    mirrored = kafka_offsets(drain)
    assert mirrored[(topic, 0)] == (100, small)
    assert decode_offset_map(100, mirrored[(topic, 0)][1]) == {105, 107, 200}
    assert mirrored[(topic, 1)] == (100, "")  # the offset without its map
    assert stored_offsets(drain)[(topic, 1)] == (100, big)  # Postgres keeps all of it
    # both count as mirrored: the oversized map is not retried on every run
    with KafkaSession(drain, load_settings()) as kafka:
        again = mirror_offsets(engine, drain, kafka)
    assert (again.partitions, again.maps_dropped) == (0, 0)
