"""Dagster on its real launch path: webserver + daemon, driven through the UI's GraphQL API.

One deployment for the session (conftest `dagster_stack`). Launches go through the same
mutations the UI sends; the daemon turns backfills into runs, ticks the schedule and the sensor,
and the run queue holds a drain's runs to one at a time. The drainer's Postgres tables must then
show exactly one drainer run per request, with the budget shared as asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from lifecycle_helpers import assert_each_record_once, sink_records
from offsets import high_watermarks
from sqlalchemy import text

from drainer.kafka.producer import OutRecord, synthetic_records
from tests.support.stack import get_engine, produce_records


def drainer_runs(drain) -> list:
    with get_engine().connect() as conn:
        return conn.execute(
            text(
                "SELECT id, status, levels, trigger, launch_key, dagster_run_id FROM runs "
                "WHERE drain = :d ORDER BY id"
            ),
            {"d": drain.name},
        ).all()


def level_numbers(run_id: int) -> dict[int, tuple[int, int]]:
    """level -> (drained, backlog after) of one drainer run."""
    with get_engine().connect() as conn:
        rows = conn.execute(
            text("SELECT level, drained, backlog_after FROM run_levels WHERE run_id = :r"),
            {"r": run_id},
        )
        return {r.level: (r.drained, r.backlog_after) for r in rows}


def committed_offsets(drain, level: int) -> dict[int, int]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                "SELECT partition, committed FROM partition_offsets WHERE drain = :d AND level = :l"
            ),
            {"d": drain.name, "l": level},
        )
        return {r.partition: r.committed for r in rows}


def produce(drain, per_level: int, seed: int) -> None:
    for level in range(drain.levels):
        produce_records(drain, synthetic_records(per_level, seed=seed + level), level=level)


def test_cron_schedule_ticked_by_the_daemon_drains_all_levels_once(dagster_stack, dagster_drains):
    ui = dagster_stack
    drain = dagster_drains.cron
    produce(drain, 200, seed=20)
    # the schedule fires every minute from the session's start: wait for ticks to drain it all
    # (the runs' stats are only the wait condition; the sink proves "once", record by record)
    name = f"{drain.name}_schedule"
    deadline = time.monotonic() + 300
    try:
        while _drained_by_schedule(drain) < 600 and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        ui.stop_schedule(name)
    runs = ui.wait_runs({"dagster/schedule_name": name})
    assert {r["status"] for r in runs} == {"SUCCESS"}
    drained = drainer_runs(drain)
    assert len(drained) == len(runs)  # one drainer run per tick
    assert all(list(r.levels) == [0, 1, 2] and r.trigger == "schedule" for r in drained)
    # everything, once: each produced (topic, partition, offset) is one row of the sink
    # (one_row_per_record); a record drained by two ticks would be there twice
    ends = high_watermarks(drain)
    assert sum(ends.values()) == 600
    assert_each_record_once(drain, ends)
    assert sum(sink_records(drain).values()) == 600
    # the runs, their event logs and the schedule's ticks are in Postgres, as `make dagster`
    # keeps them (scripts/dagster_home.py), and no SQLite file stands in for any of them
    assert not sorted(ui.home.rglob("*.db")), "Dagster wrote SQLite storage"
    with psycopg.connect(ui.storage_url.replace("+psycopg2", "")) as conn:
        stored = {
            row[0]
            for row in conn.execute(
                "SELECT run_id FROM runs WHERE run_id = ANY(%s)", ([r["runId"] for r in runs],)
            )
        }
        events = conn.execute(
            "SELECT count(*) FROM event_logs WHERE run_id = ANY(%s) "
            "AND dagster_event_type = 'ASSET_MATERIALIZATION'",
            (list(stored),),
        ).fetchone()[0]
        # the stack's database is its own: every schedule tick in it is this session's
        ticks = conn.execute(
            "SELECT count(*) FROM job_ticks WHERE type = 'SCHEDULE' AND status = 'SUCCESS'"
        ).fetchone()[0]
    assert stored == {r["runId"] for r in runs}
    assert events == 3 * len(runs)  # each run materializes the three levels
    assert ticks >= len(runs)


def test_ui_launches_backfills_schedule_and_sensor_each_make_one_drainer_run(
    dagster_stack, dagster_drains
):
    ui = dagster_stack
    drain = dagster_drains.launches

    # 1. "Materialize all": one backfill of every level -> one Dagster run, one drainer run
    produce(drain, 100, seed=0)
    all_runs = ui.wait_backfill(ui.launch_backfill(drain.name))
    assert [r["status"] for r in all_runs] == ["SUCCESS"]
    (first,) = drainer_runs(drain)
    assert (first.status, list(first.levels), first.trigger) == ("committed", [0, 1, 2], "backfill")
    assert first.dagster_run_id == all_runs[0]["runId"]
    assert all_runs[0]["tags"]["drainer/run_id"] == str(first.id)
    assert sum(n for n, _ in level_numbers(first.id).values()) == 300

    # 2. backfill of levels {0, 2}: Dagster makes two runs (0..0 and 2..2), the drainer one
    produce(drain, 1000, seed=10)
    level_1_before = committed_offsets(drain, 1)
    backfill = ui.launch_backfill(drain.name, ["0", "2"])
    split = ui.wait_backfill(backfill)
    assert sorted(r["status"] for r in split) == ["SUCCESS", "SUCCESS"]
    assert len(split) == 2  # Dagster's single-run policy: one run per contiguous range
    runs = drainer_runs(drain)
    assert len(runs) == 2
    shared = runs[-1]
    assert (shared.status, list(shared.levels)) == ("committed", [0, 2])
    assert shared.launch_key == f"dagster-backfill:{backfill}"
    numbers = level_numbers(shared.id)
    assert set(numbers) == {0, 2}
    assert numbers[0][0] + numbers[2][0] == 700  # one budget, shared by the two levels
    assert committed_offsets(drain, 1) == level_1_before  # level 1 untouched
    assert {r["tags"]["drainer/run_id"] for r in split} == {str(shared.id)}
    # both partitions materialized, each with its own level's numbers from that run
    by_partition = {
        m["partition"]: m["metadata"]
        for m in ui.materializations(drain.name)
        if m["runId"] in {r["runId"] for r in split}
    }
    assert set(by_partition) == {"0", "2"}
    for level in (0, 2):
        assert by_partition[str(level)]["drain_run_id"] == shared.id
        assert by_partition[str(level)]["drained"] == numbers[level][0]
        assert by_partition[str(level)]["backlog_after"] == numbers[level][1]
        assert by_partition[str(level)]["run_drained"] == 700

    # 3. backfill of level {1}: its own run, the whole budget for level 1
    only_1 = ui.wait_backfill(ui.launch_backfill(drain.name, ["1"]))
    assert [r["status"] for r in only_1] == ["SUCCESS"]
    runs = drainer_runs(drain)
    assert len(runs) == 3 and list(runs[-1].levels) == [1]
    assert level_numbers(runs[-1].id)[1][0] == 700

    # 4. the lag sensor, ticked by the daemon: backlog 1,600 >= 500 asks for an all-levels run
    ui.start_sensor(f"{drain.name}_lag_sensor")
    try:
        (sensed,) = ui.wait_runs({"dagster/sensor_name": f"{drain.name}_lag_sensor"})
    finally:
        ui.stop_sensor(f"{drain.name}_lag_sensor")
    assert sensed["status"] == "SUCCESS"
    runs = drainer_runs(drain)
    assert len(runs) == 4
    assert (list(runs[-1].levels), runs[-1].trigger) == ([0, 1, 2], "sensor")
    assert sum(n for n, _ in level_numbers(runs[-1].id).values()) == 700

    # four requests, five Dagster runs (the backfill of {0, 2} made two), four drainer runs
    assert len(all_runs) + len(split) + len(only_1) + 1 == 5
    assert all(r.status == "committed" for r in runs)

    # 5. "Materialize" of one partition: the UI launches a run, not a backfill
    produce(drain, 50, seed=30)
    launched = ui.wait_run(ui.launch_run(drain.name, {"dagster/partition": "1"}))
    assert launched["status"] == "SUCCESS"
    runs = drainer_runs(drain)
    assert len(runs) == 5
    assert (list(runs[-1].levels), runs[-1].trigger) == ([1], "dagster")
    assert runs[-1].dagster_run_id == launched["runId"]
    assert level_numbers(runs[-1].id)[1][0] > 0
    assert all(r.status == "committed" for r in drainer_runs(drain))


def test_a_ui_launched_run_of_a_kafka_sink_produces_each_record_once_with_its_metadata(
    dagster_stack, dagster_drains, spark
):
    """ "Materialize all" of a drain whose sink is a Kafka topic: one Dagster run, one drainer
    run, one transaction (on the Spark server where it can), and the asset's metadata says what
    it produced, where and with which transactional id."""
    from kafka_output import assert_each_source_once, auto_producer

    ui, drain = dagster_stack, dagster_drains.produces
    produce(drain, 100, seed=40)
    runs = ui.wait_backfill(ui.launch_backfill(drain.name))
    assert [r["status"] for r in runs] == ["SUCCESS"]
    (run,) = drainer_runs(drain)
    assert run.status == "committed" and run.dagster_run_id == runs[0]["runId"]
    out = drain.sink.topic
    assert_each_source_once(out, high_watermarks(drain))
    metadata = [m["metadata"] for m in ui.materializations(drain.name)]
    assert metadata and all(m["kafka_produced_" + out] == 300 for m in metadata)
    assert {m["kafka_producer"] for m in metadata} == {auto_producer(spark)}
    assert {m["kafka_transactional_id"] for m in metadata} == {f"drainer-{drain.name}"}


def _drained_by_schedule(drain) -> int:
    return sum(
        n
        for r in drainer_runs(drain)
        if r.status == "committed"
        for n, _ in level_numbers(r.id).values()
    )


def test_backfill_on_a_stock_instance_waits_for_the_drain_instead_of_failing_busy(stack, tmp_path):
    """Issue 20: on Dagster's defaults (no pool limit) a backfill's two runs start together and
    the later one found the drain busy (DrainBusy). The test holds the drain's lease until both
    runs have started, so both must wait; then one drains and the other reports that run."""
    import os
    import threading

    from drainer.store.leases import drain_lease
    from tests.integration.dagster_stack import BACKFILL_LOOP_S, REPO, DagsterStack
    from tests.support.drains import create_drain, delete_topics

    drain, path = create_drain(tmp_path, prefix="stock", budget=700)
    env = {
        **os.environ,
        "DRAINER_CONFIG": str(path),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    deployment = DagsterStack(
        home=tmp_path / "home", env=env, stock=True, backfill_loop_s=BACKFILL_LOOP_S
    )
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with drain_lease(get_engine(), drain.row()):
            held.set()
            release.wait(600)

    holder = threading.Thread(target=hold)
    try:
        ui = deployment.start()
        assert not (tmp_path / "home" / "dagster.yaml").exists()  # Dagster's defaults
        produce(drain, 1000, seed=40)
        holder.start()
        assert held.wait(30)
        backfill = ui.launch_backfill(drain.name, ["0", "2"])
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            runs = ui.runs({"dagster/backfill": backfill})
            if len(runs) == 2 and all(_step_started(ui, r["runId"]) for r in runs):
                break
            time.sleep(0.5)
        # both steps have started and ask for the lease: the race happened only once each
        # says, in its step's log, that it waits on the held drain (drainer.store.leases)
        waited: set[str] = set()
        deadline = time.monotonic() + 120
        while len(waited) < 2 and time.monotonic() < deadline:
            waited |= {
                r["runId"]
                for r in runs
                if any("is held by another run" in m for m in ui.run_messages(r["runId"]))
            }
            time.sleep(0.5)
        assert len(waited) == 2, f"only {len(waited)} of the backfill's 2 steps waited"
        release.set()
        split = ui.wait_backfill(backfill)
    finally:
        release.set()
        if holder.is_alive():
            holder.join()
        deployment.stop()
        delete_topics(drain)
    assert sorted(r["status"] for r in split) == ["SUCCESS", "SUCCESS"], deployment.logs()
    (shared,) = drainer_runs(drain)
    assert (shared.status, list(shared.levels)) == ("committed", [0, 2])
    assert sum(n for n, _ in level_numbers(shared.id).values()) == 700


def _step_started(ui, run_id: str) -> bool:
    """True once the run's step (the drain's asset) has started in its process."""
    run = ui.gql(
        "query($id: ID!) { runOrError(runId: $id) { ... on Run { stepStats { startTime } } } }",
        id=run_id,
    )["runOrError"]
    return any(step["startTime"] for step in run.get("stepStats") or [])


def _produce_sized(drain, level: int, partition: int, count: int, size: int, t0_ms: int) -> None:
    """`count` records of exactly `size` key+value bytes, 10 ms apart from `t0_ms`."""
    records = (
        OutRecord(value=f"{i:0{size - 1}d}".encode(), key=b"k", timestamp_ms=t0_ms + 10 * i)
        for i in range(count)
    )
    produce_records(drain, records, level=level, partition=partition)


def _plan(drains_file: Path, drain, *args: str) -> dict:
    """`drainer plan <drain> --json` as an operator runs it, on the session's drains file."""
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "plan", drain.name, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DRAINER_CONFIG": str(drains_file)},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_backfill_of_levels_0_and_2_keeps_max_wait_and_the_byte_budget(
    dagster_stack, dagster_drains
):
    """Issue 19's keys on the UI's launch path: a backfill of levels {0, 2} of a drain with
    `max_wait: 1h`, `budget_bytes: 200KB`, `run_seconds: 3600` and budget 700 (levels 0 and 2
    reserve 140 / 560).

    Level 0: 300 records of 9 bytes two hours old in partition 0, 1,000 fresh in partition 1.
    Level 2: 1,000 fresh records of 1,000 bytes. Level 1: 1,000 fresh (not in the backfill).
    Bytes: level 2's share is 200,000 x 560/700 = 160,000 bytes, 160 records; what level 0's
    1,300 small records leave (200,000 - 11,700 - 160,000 = 28,300) buys it 28 more: 188.
    Records: max_wait grants level 0's 300 late records first; level 2 reads its 188; level 0
    gets the rest, 700 - 300 - 188 = 212, from its fresh partition. Without max_wait level 0's
    512 would split 256 / 256 and leave 44 two-hour-old records waiting. The run is the first of
    the drain, so run_seconds has no throughput yet and the budget is `budget`; after it, the
    time box uses this run's records/s.
    """
    ui = dagster_stack
    drain = dagster_drains.service
    now = int(time.time()) * 1000
    two_hours_ago, ten_minutes_ago = now - 2 * 3_600_000, now - 600_000
    _produce_sized(drain, 0, 0, 300, 9, two_hours_ago)
    _produce_sized(drain, 0, 1, 1000, 9, ten_minutes_ago)
    _produce_sized(drain, 1, 0, 1000, 9, ten_minutes_ago)
    _produce_sized(drain, 2, 0, 1000, 1000, ten_minutes_ago)

    # what the backfill will plan, as `drainer plan --levels 0,2` shows it
    shown = _plan(dagster_drains.path, drain, "--levels", "0,2")
    levels = {lv["level"]: lv for lv in shown["levels"]}
    assert {
        lv: (p["late"], p["for_max_wait"], p["byte_cap"], p["planned"]) for lv, p in levels.items()
    } == {2: (0, 0, 188, 188), 0: (300, 300, 1300, 512)}
    assert levels[0]["oldest_age_s"] >= 7200  # from the records' own timestamps
    assert (shown["budget"], shown["run_budget"]["budget_bytes"]) == (700, 200_000)
    assert shown["run_budget"]["run_seconds_throughput"]["records_per_s"] is None  # no run yet
    expected = [(2, 0, 0, 188, 188), (0, 0, 0, 300, 300), (0, 1, 0, 212, 212)]
    assert [
        (r["level"], r["partition"], r["start"], r["end"], r["records"]) for r in shown["ranges"]
    ] == expected

    level_1_before = committed_offsets(drain, 1)
    backfill = ui.launch_backfill(drain.name, ["0", "2"])
    split = ui.wait_backfill(backfill)
    assert sorted(r["status"] for r in split) == ["SUCCESS", "SUCCESS"]
    (run,) = drainer_runs(drain)  # the backfill's two Dagster runs, one drainer run
    assert (run.status, list(run.levels), run.trigger) == ("committed", [0, 2], "backfill")
    assert run.launch_key == f"dagster-backfill:{backfill}"
    with get_engine().connect() as conn:
        stored = conn.execute(
            text(
                "SELECT level, partition, start_offset, end_offset, records FROM run_ranges "
                "WHERE run_id = :r ORDER BY level DESC, partition"
            ),
            {"r": run.id},
        ).all()
        # the time box measures a run's whole slot (slot_s), its pre-commit time if none
        budget, seconds = conn.execute(
            text("SELECT budget, coalesce(slot_s, duration_s) FROM runs WHERE id = :r"),
            {"r": run.id},
        ).one()
        read = dict(
            conn.execute(
                text("SELECT level, read_bytes FROM run_levels WHERE run_id = :r"), {"r": run.id}
            ).all()
        )
    # late records first: level 0's two-hour-old partition emptied, the fresh one got the rest
    assert [tuple(r) for r in stored] == expected
    assert {lv: n for lv, (n, _) in level_numbers(run.id).items()} == {0: 512, 2: 188}
    # the byte budget bounded the run: level 2 read 188 of its 1,000 records, within 200KB
    assert budget == 700  # the first run of the drain: run_seconds falls back to `budget`
    assert read == {0: 512 * 9, 2: 188 * 1000}
    assert sum(read.values()) <= 200_000
    assert committed_offsets(drain, 1) == level_1_before  # level 1 untouched
    assert not any(level_1_before.values())

    # exactly once, record by record: the sink holds each read record once, nothing else
    ends = {(drain.level_topic(lv), p): end for lv, p, _, end, _ in expected}
    assert_each_record_once(drain, ends)

    # no record of the covered levels is past its wait now; the time box has this run's rate
    after = _plan(dagster_drains.path, drain)
    assert all(lv["late"] == lv["for_max_wait"] == 0 for lv in after["levels"])
    throughput = after["run_budget"]["run_seconds_throughput"]
    assert throughput["records_per_s"] == pytest.approx(700 / seconds)
    assert throughput["bytes_per_s"] == pytest.approx(sum(read.values()) / seconds)


def test_max_wait_is_a_freshness_policy_failed_while_late_records_wait_and_passed_once_drained(
    dagster_stack, dagster_drains
):
    """A drain with `max_wait: 1m` has Dagster's time-window freshness policy (fail window 1m,
    Dagster's shortest, so no warn window below it). A run with budget 700 leaves 300 of 1,000
    ten-minute-old records waiting. Dagster 1.13 times the window from the last materialization
    only (`TimeWindowFreshnessPolicyEvaluator` reads `last_materialization.timestamp`, no
    metadata: docs/dagster.md, "Why the freshness state cannot see the records a run leaves"),
    so the asset is fresh right after that run, and the daemon fails it once a minute passes
    with no run. The next run drains the backlog, and the asset passes again."""
    from dagster_project.definitions import all_levels_tags

    ui, drain = dagster_stack, dagster_drains.fresh
    policy, _ = ui.freshness(drain.name)
    assert policy == {
        "__typename": "TimeWindowFreshnessPolicy",
        "failWindowSeconds": 60,
        "warnWindowSeconds": None,
    }
    _produce_sized(drain, 0, 0, 1000, 9, int(time.time() * 1000) - 600_000)

    first = ui.wait_run(ui.launch_run(drain.name, all_levels_tags(drain)))
    assert first["status"] == "SUCCESS"
    (run,) = drainer_runs(drain)
    assert level_numbers(run.id)[0] == (700, 300)  # drained, left waiting
    (level_0,) = [
        m["metadata"]
        for m in ui.materializations(drain.name)
        if m["runId"] == first["runId"] and m["partition"] == "0"
    ]
    assert level_0["oldest_age_s"] >= 60  # what it left waiting is past max_wait
    # yet the daemon's first evaluation after the run passes it: the late records are not
    # Dagster's input (this wait is inside the minute the next one waits anyway)
    ui.wait_freshness(drain.name, "HEALTHY", timeout_s=55)
    ui.wait_freshness(drain.name, "DEGRADED", timeout_s=180)
    assert time.time() - first["endTime"] >= 55  # failed once max_wait passed without a run

    second = ui.wait_run(ui.launch_run(drain.name, all_levels_tags(drain)))
    assert second["status"] == "SUCCESS"
    assert level_numbers(drainer_runs(drain)[-1].id)[0] == (300, 0)
    ui.wait_freshness(drain.name, "HEALTHY", timeout_s=60)


def test_a_failing_runs_secret_is_redacted_in_dagsters_storage_and_files(
    dagster_stack, dagster_drains
):
    """A run launched from the UI whose processor fails with the database URL, password and all,
    in its error (as a driver's connection error may). Dagster keeps a step's error with its
    causes in its event log and prints it to the compute logs: neither may hold the password,
    nor may any other table of Dagster's storage or any file of its home. Fails by naming the
    tables and files that hold it (before the fix: event_logs, the compute logs)."""
    from urllib.parse import unquote, urlsplit

    from drainer.settings import load_settings

    ui = dagster_stack
    drain = dagster_drains.leaky
    url = load_settings().database_url  # the run's processor raises with this URL
    password = urlsplit(url).password or ""
    assert len(password) >= 8, "the local stack's Postgres has a generated password"
    secrets = {password, unquote(password)}
    produce(drain, 10, seed=50)

    run = ui.wait_run(ui.launch_run(drain.name, {"dagster/partition": "0"}))
    assert run["status"] == "FAILURE"

    with psycopg.connect(ui.storage_url.replace("+psycopg2", "")) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) "
                "FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
            )
        ]
        holding = {
            table: n
            for table in tables
            for secret in secrets
            if (
                n := conn.execute(
                    f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s", (f"%{secret}%",)
                ).fetchone()[0]
            )
        }
        (failure,) = conn.execute(
            "SELECT event FROM event_logs WHERE run_id = %s AND dagster_event_type = "
            "'STEP_FAILURE'",
            (run["runId"],),
        ).fetchone()
    assert "event_logs" in " ".join(tables)  # the search covered Dagster's storage
    assert holding == {}, f"the password is stored in {holding}"
    # the step's failure is there, redacted: the processor's error with *** for the password
    assert "could not connect to" in failure and "***" in failure

    files = [p for p in ui.home.rglob("*") if p.is_file()]
    assert any("compute_logs" in str(p) for p in files), sorted(map(str, files))[:50]
    leaking = [str(p) for p in files if any(s in p.read_text(errors="replace") for s in secrets)]
    assert leaking == [], f"the password is in {leaking}"

    with get_engine().connect() as conn:
        errors = conn.execute(
            text("SELECT error FROM runs WHERE drain = :d"), {"d": drain.name}
        ).scalars()
        assert [e for e in errors if any(s in (e or "") for s in secrets)] == []


def test_the_daily_maintenance_job_folds_an_earlier_versions_sink_from_the_launchpad(
    dagster_stack, dagster_drains
):
    """The maintenance job every drain gets (scheduled daily), launched as the Launchpad does:
    the drain's sink, a LIST target with 40 run partitions as earlier versions left it, comes
    out as one range partition under `<table>_runs` with the same rows, and the job records
    what it did as an observation of the drain's asset."""
    from drainer.store import sink_partitions

    ui, drain = dagster_stack, dagster_drains.upkept
    table = drain.sink.table
    with get_engine().begin() as conn:
        conn.execute(
            text(
                f'CREATE TABLE "{table}" (n integer, _drainer_run_id bigint NOT NULL) '
                "PARTITION BY LIST (_drainer_run_id)"
            )
        )
        for run_id in range(1, 41):
            conn.execute(text(f'CREATE TABLE "{table}_r{run_id}" (LIKE "{table}")'))
            conn.execute(text(f'INSERT INTO "{table}_r{run_id}" VALUES ({run_id}, {run_id})'))
            conn.execute(
                text(
                    f'ALTER TABLE "{table}" ATTACH PARTITION "{table}_r{run_id}" '
                    f"FOR VALUES IN ({run_id})"
                )
            )

    run = ui.wait_run(ui.launch_job(f"{drain.name}_table_maintenance"))
    assert run["status"] == "SUCCESS", ui.logs()

    with get_engine().connect() as conn:
        parts = sink_partitions.partitions(conn, table)
        rows = sorted(conn.execute(text(f'SELECT n FROM "{table}"')).scalars())
    assert [(p.first, p.last, p.runs, p.listed, p.parent) for p in parts] == [
        (1, 40, 40, False, f"{table}_runs")
    ]
    assert rows == list(range(1, 41))
    (seen,) = [o for o in ui.observations(drain.name) if o["runId"] == run["runId"]]
    assert seen["maintenance_partitions_before"] == 40
    assert seen["maintenance_partitions_after"] == 1
    assert seen["maintenance_folds"] == 5 + 1  # 40 = 5 LIST folds of 8, then the move
