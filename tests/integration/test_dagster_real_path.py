"""Dagster on its real launch path: webserver + daemon, driven through the UI's GraphQL API.

One deployment for the session (conftest `dagster_stack`). Launches go through the same
mutations the UI sends; the daemon turns backfills into runs, ticks the schedule and the sensor,
and the run queue holds a drain's runs to one at a time. The drainer's Postgres tables must then
show exactly one drainer run per request, with the budget shared as asked.
"""

from __future__ import annotations

import time

import psycopg
from sqlalchemy import text

from drainer.kafka.producer import produce_records, synthetic_records
from drainer.store import get_engine


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
    name = f"{drain.name}_schedule"
    deadline = time.monotonic() + 300
    try:
        while _drained_by_schedule(drain) < 600 and time.monotonic() < deadline:
            time.sleep(3)
    finally:
        ui.stop_schedule(name)
    runs = ui.wait_runs({"dagster/schedule_name": name})
    assert {r["status"] for r in runs} == {"SUCCESS"}
    drained = drainer_runs(drain)
    assert len(drained) == len(runs)  # one drainer run per tick
    assert all(list(r.levels) == [0, 1, 2] and r.trigger == "schedule" for r in drained)
    assert _drained_by_schedule(drain) == 600  # everything, once
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
    from drainer.testing import create_drain, delete_topics
    from tests.integration.dagster_stack import REPO, DagsterStack

    drain, path = create_drain(tmp_path, prefix="stock", budget=700)
    env = {
        **os.environ,
        "DRAINER_CONFIG": str(path),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    deployment = DagsterStack(home=tmp_path / "home", env=env, stock=True)
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
            if len(runs) == 2 and not {r["status"] for r in runs} & {"QUEUED", "STARTING"}:
                break
            time.sleep(1)
        time.sleep(15)  # both run processes reach the drain while it is still held
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
