"""Airflow on its real path: API server, scheduler and DAG processor, driven through `/api/v2`.

One deployment for the module (`airflow_stack`), started as `make airflow` starts it, with the
metadata in Postgres. Its dags folder renders this repository's drains.yaml (unscheduled: it
must parse, not run) and the tests' own drains file with `drainer.airflow.drain_dags`, plus a
DAG scheduled on one drain's sink asset. Triggers, backfills and task logs go through the REST
API as the UI sends them; drainer's Postgres tables and the sink tables then show what ran.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from lifecycle_helpers import assert_each_record_once, sink_records
from offsets import high_watermarks
from sqlalchemy import text

from drainer.config import DrainConfig, load_drains
from drainer.kafka.producer import synthetic_records
from drainer.settings import load_settings
from tests.integration.airflow_stack import REPO, AirflowStack
from tests.support.drains import delete_topics, drain_body
from tests.support.stack import get_engine, produce_records

pytestmark = pytest.mark.timeout(1500)

PER_RECORD = "spark_jobs.examples:one_row_per_record"


class AirflowDrains(NamedTuple):
    path: Path
    manual: DrainConfig
    backfilled: DrainConfig
    cron: DrainConfig
    killed: DrainConfig
    failing: DrainConfig


@pytest.fixture(scope="module")
def airflow_drains(stack, tmp_path_factory) -> Iterator[AirflowDrains]:
    """`manual`: triggered by hand, its sink an asset a downstream DAG waits on; `backfilled`:
    a yearly cron for backfills; `cron`: fires every minute; `killed`: its task is killed -9
    mid-run and retried; `failing`: its processor fails until the drains file is fixed."""
    from drainer.kafka.session import KafkaSession

    suffix = uuid.uuid4().hex[:6]
    bodies: dict[str, dict[str, Any]] = {
        "manual": {"processor": PER_RECORD, "measure_bytes": True},  # bytes reach the XCom
        "backfilled": {"processor": PER_RECORD, "schedule": "0 0 1 1 *"},
        "cron": {"processor": PER_RECORD, "schedule": "* * * * *"},
        "killed": {"processor": "spark_jobs.examples:slow_one_row_per_record"},
        "failing": {"processor": "tests.processors:always_fails"},
    }
    names = {role: f"af_{role}_{suffix}" for role in bodies}
    drains_yaml = {
        names[role]: drain_body(names[role], group=f"g_{names[role]}", **body)
        for role, body in bodies.items()
    }
    path = tmp_path_factory.mktemp("airflow_drains") / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": drains_yaml}))
    loaded = load_drains(path)
    drains = {role: loaded[name] for role, name in names.items()}
    for drain in drains.values():
        with KafkaSession(drain, load_settings()) as kafka:
            kafka.create_topics()
    yield AirflowDrains(path=path, **drains)
    for drain in drains.values():
        delete_topics(drain)


DAGS = """\
from datetime import timedelta

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from drainer.airflow import drain_dags
from drainer.airflow.dags import sink_asset
from drainer.airflow.hook import environment_settings

DRAINS = {drains!r}
# `manual` reaches the services through the Airflow connection the fixture makes
drain_dags(DRAINS, select=[{manual!r}], drainer_conn_id="drainer_test")
drain_dags(DRAINS, select={plain!r})
drain_dags(DRAINS, select=[{killed!r}], default_args={{"retries": 1, "retry_delay": timedelta(seconds=1)}})
drain_dags(DRAINS, select=[{failing!r}], default_args={{"retries": 0}})
# the drain Dagster serves too, unscheduled: launched by hand from both at once
drain_dags({dagster!r}, select=[{both!r}], schedules=False)

settings = environment_settings(DRAINS)
from drainer.config import get_drain

with DAG("after_{manual}", schedule=[sink_asset(get_drain({manual!r}, DRAINS), settings)]):
    EmptyOperator(task_id="read_the_table")
"""

REPO_DAGS = """\
from drainer.airflow import drain_dags

# this repository's drains, unscheduled: they must parse, not drain the demo topics
drain_dags({drains!r}, schedules=False)
"""


@pytest.fixture(scope="module")
def airflow_stack(airflow_drains, dagster_drains, tmp_path_factory) -> Iterator[AirflowStack]:
    dags = tmp_path_factory.mktemp("airflow_dags")
    d = airflow_drains
    (dags / "drains_dags.py").write_text(
        DAGS.format(
            drains=str(d.path),
            plain=[d.backfilled.name, d.cron.name],
            killed=d.killed.name,
            failing=d.failing.name,
            dagster=str(dagster_drains.path),
            both=dagster_drains.both.name,
            manual=d.manual.name,
        )
    )
    (dags / "repo_dags.py").write_text(REPO_DAGS.format(drains=str(REPO / "drains.yaml")))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    deployment = AirflowStack(
        home=tmp_path_factory.mktemp("airflow_home"), dags_folder=dags, env=env
    )
    try:
        deployment.start()
        deployment.post("/connections", drainer_connection())
        deployment.wait_dags(
            [
                d.manual.name,
                d.backfilled.name,
                d.cron.name,
                d.killed.name,
                d.failing.name,
                dagster_drains.both.name,
                f"after_{d.manual.name}",
                "events",
                "events_lake",
            ]
        )
        yield deployment
    finally:
        deployment.stop()


def drainer_connection() -> dict[str, Any]:
    """A `drainer` connection naming the shared Postgres (password and all) and broker."""
    from sqlalchemy.engine import make_url

    from drainer.settings import load_settings

    settings = load_settings()
    url = make_url(settings.database_url)
    return {
        "connection_id": "drainer_test",
        "conn_type": "drainer",
        "host": url.host,
        "port": url.port,
        "login": url.username,
        "password": url.password,
        "schema": url.database,
        "extra": json.dumps({"kafka_bootstrap_servers": settings.bootstrap_servers}),
    }


# ---------------------------------------------------------------- drainer's side


def drainer_runs(drain: DrainConfig) -> list[Any]:
    with get_engine().connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT id, status, levels, trigger, launch_key, attempts, error FROM runs "
                    "WHERE drain = :d ORDER BY id"
                ),
                {"d": drain.name},
            ).all()
        )


def level_drained(run_id: int) -> dict[int, int]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text("SELECT level, drained FROM run_levels WHERE run_id = :r"), {"r": run_id}
        )
        return {r.level: r.drained for r in rows}


def produce(drain: DrainConfig, per_level: int, seed: int) -> None:
    for level in range(drain.levels):
        produce_records(drain, synthetic_records(per_level, seed=seed + level), level=level)


def level_ends(drain: DrainConfig, levels: list[int]) -> dict[tuple[str, int], int]:
    """The high watermarks of `levels` only; the others' partitions end at 0 (not drained)."""
    ends = high_watermarks(drain)
    keep = {drain.level_topic(level) for level in levels}
    return {key: (end if key[0] in keep else 0) for key, end in ends.items()}


# ---------------------------------------------------------------- the tests


def test_dags_of_the_drains_file_parse_with_no_import_errors(airflow_stack):
    errors = airflow_stack.get("/importErrors")
    assert errors["total_entries"] == 0, errors
    # drainer is an Airflow provider (its entry point), with its connection type
    providers = {p["package_name"] for p in airflow_stack.get("/providers")["providers"]}
    assert "drainer" in providers
    events = airflow_stack.get("/dags/events")
    assert events["max_active_runs"] == 1
    details = airflow_stack.get("/dags/events/details")
    assert details["params"]["levels"]["value"] == []
    assert "events_table_maintenance" in {
        d["dag_id"] for d in airflow_stack.get("/dags", limit=100)["dags"]
    }


def test_manual_trigger_of_levels_0_and_2_drains_those_levels_once_with_summary_log_and_asset(
    airflow_stack, airflow_drains
):
    af, drain = airflow_stack, airflow_drains.manual
    produce(drain, 100, seed=0)
    run_id = af.trigger(drain.name, {"levels": [0, 2]})
    run = af.wait_run(drain.name, run_id)
    assert run["state"] == "success", af.task_log(drain.name, run_id, 1)
    (drained,) = drainer_runs(drain)
    assert (drained.status, list(drained.levels), drained.trigger) == (
        "committed",
        [0, 2],
        "airflow",
    )
    assert drained.launch_key == f"airflow-run:{drain.name}:{run_id}"
    assert level_drained(drained.id) == {0: 100, 2: 100}
    # level 1 untouched; levels 0 and 2 each record once
    assert_each_record_once(drain, level_ends(drain, [0, 2]))
    # the run summary is the task's XCom value
    summary = af.xcom(drain.name, run_id)
    assert summary["run_id"] == drained.id and summary["drained"] == 200
    assert summary["levels"]["0"]["records"] == 100 and summary["levels"]["0"]["bytes"] > 0
    assert set(summary["levels"]) == {"0", "2"}
    assert summary["backlog_after"] == 0
    # the task log has drainer's own run line, and not the connection's password
    log = af.task_log(drain.name, run_id, 1)
    assert f"run {drained.id} of drain {drain.name} committed: 200 records" in log, log
    password = drainer_connection()["password"]
    assert password and password not in log
    # the DAG scheduled on the sink table's asset ran after the drain
    after = f"after_{drain.name}"

    def downstream() -> tuple[bool, Any]:
        runs = af.dag_runs(after)
        return any(r["state"] == "success" for r in runs), runs

    (ran,) = [r for r in af.poll(downstream, 180) if r["state"] == "success"]
    assert ran["run_type"] == "asset_triggered"
    assert ran["queued_at"] > run["start_date"]


def test_backfill_with_levels_conf_makes_runs_that_each_drain_those_levels(
    airflow_stack, airflow_drains
):
    af, drain = airflow_stack, airflow_drains.backfilled

    # with catchup off, Airflow runs the latest tick once when the DAG appears (all levels,
    # nothing to drain yet): let it end before the records arrive
    def latest_tick_done() -> tuple[bool, Any]:
        runs = [r for r in af.dag_runs(drain.name) if r["run_type"] == "scheduled"]
        return bool(runs) and all(r["state"] in ("success", "failed") for r in runs), runs

    af.poll(latest_tick_done, 240, every_s=2)
    produce(drain, 100, seed=10)
    backfill = af.post(
        "/backfills",
        {
            "dag_id": drain.name,
            "from_date": "2024-01-01T00:00:00Z",
            "to_date": "2025-06-01T00:00:00Z",
            "dag_run_conf": {"levels": [0, 2]},
            "max_active_runs": 1,
            "reprocess_behavior": "none",
        },
    )

    def done() -> tuple[bool, Any]:
        runs = [r for r in af.dag_runs(drain.name) if r["run_type"] == "backfill"]
        return len(runs) == 2 and all(r["state"] in ("success", "failed") for r in runs), runs

    runs = af.poll(done, 600, every_s=2)
    assert {r["state"] for r in runs} == {"success"}, backfill
    assert all(r["conf"] == {"levels": [0, 2]} for r in runs)
    drained = [r for r in drainer_runs(drain) if "backfill__" in r.launch_key]
    assert len(drained) == 2  # one drainer run per backfill run
    assert all(list(r.levels) == [0, 2] and r.status == "committed" for r in drained)
    assert {r.launch_key for r in drained} == {
        f"airflow-run:{drain.name}:{r['dag_run_id']}" for r in runs
    }
    assert_each_record_once(drain, level_ends(drain, [0, 2]))


def test_cron_schedule_fires_runs_that_drain_all_levels(airflow_stack, airflow_drains):
    af, drain = airflow_stack, airflow_drains.cron
    produce(drain, 50, seed=20)
    ends = high_watermarks(drain)
    try:
        # `* * * * *`: within a minute or two a scheduled run drains what was just produced
        def drained_by_schedule() -> tuple[bool, Any]:
            runs = [r for r in drainer_runs(drain) if r.status == "committed"]
            return sum(sum(level_drained(r.id).values()) for r in runs) >= 150, runs

        af.poll(drained_by_schedule, 240, every_s=2)
    finally:
        af.patch(f"/dags/{drain.name}", {"is_paused": True})
    scheduled = {
        r["dag_run_id"]: r for r in af.dag_runs(drain.name) if r["run_type"] == "scheduled"
    }
    drained = [r for r in drainer_runs(drain) if r.status == "committed"]
    # every drainer run came from a cron tick's DAG run, and covered all levels
    assert all(list(r.levels) == [0, 1, 2] and r.trigger == "airflow" for r in drained)
    assert {r.launch_key.split(":", 2)[2] for r in drained} <= set(scheduled)
    assert_each_record_once(drain, ends)


def test_task_killed_mid_run_is_retried_by_airflow_and_resumes_the_plan_exactly_once(
    airflow_stack, airflow_drains
):
    af, drain = airflow_stack, airflow_drains.killed
    produce(drain, 100, seed=30)
    ends = high_watermarks(drain)
    run_id = af.trigger(drain.name)

    def mid_run() -> tuple[bool, Any]:
        runs = drainer_runs(drain)
        return bool(runs) and runs[0].status == "running", runs

    af.poll(mid_run, 240, every_s=0.2)  # planned, marked running, in the processor's 10 s
    ti = af.task(drain.name, run_id)
    assert ti["try_number"] == 1
    # the process that runs the task's code, titled `airflow worker -- <task instance id>`
    title = Path(f"/proc/{ti['pid']}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    assert title.endswith(f"-- {ti['id']}") and "LocalExecutor" not in title, title
    os.kill(ti["pid"], signal.SIGKILL)
    run = af.wait_run(drain.name, run_id)
    assert run["state"] == "success", af.logs()
    ti = af.task(drain.name, run_id)
    assert ti["try_number"] == 2  # the killed try, then Airflow's retry
    (drained,) = drainer_runs(drain)  # the retry resumed the plan: no second run
    assert drained.status == "committed" and drained.attempts == 2
    assert sum(level_drained(drained.id).values()) == 300
    assert_each_record_once(drain, ends)
    assert sum(sink_records(drain).values()) == 300
    assert "(resumed)" in af.task_log(drain.name, run_id, 2)


def test_airflow_and_dagster_runs_of_one_drain_wait_for_each_others_lease(
    airflow_stack, dagster_stack, dagster_drains
):
    af, drain = airflow_stack, dagster_drains.both
    produce(drain, 100, seed=40)  # 300 records, budget 300: the first run drains them all
    ends = high_watermarks(drain)
    from dagster_project.definitions import all_levels_tags

    dagster_run = dagster_stack.launch_run(drain.name, all_levels_tags(drain))
    airflow_run = af.trigger(drain.name)
    assert dagster_stack.wait_run(dagster_run)["status"] == "SUCCESS"
    assert af.wait_run(drain.name, airflow_run)["state"] == "success"
    runs = drainer_runs(drain)
    assert sorted(r.trigger for r in runs) == ["airflow", "dagster"]
    assert all(r.status == "committed" for r in runs)
    waited = "is held by another run: waiting"
    logs = af.task_log(drain.name, airflow_run, 1) + "\n".join(
        dagster_stack.run_messages(dagster_run)
    )
    assert waited in logs  # they met: one run waited for the other's lease
    assert sum(sum(level_drained(r.id).values()) for r in runs) == 300
    assert_each_record_once(drain, ends)


def test_failing_processor_fails_the_task_with_one_line_and_the_next_run_resumes(
    airflow_stack, airflow_drains
):
    af, drain = airflow_stack, airflow_drains.failing
    produce(drain, 50, seed=50)
    ends = high_watermarks(drain)
    first = af.trigger(drain.name)
    assert af.wait_run(drain.name, first)["state"] == "failed"
    (opened,) = drainer_runs(drain)
    assert opened.status == "failed"
    log = af.task_log(drain.name, first, 1)
    # the task's failure, as the UI's log view shows it: one line, no drainer trace
    line = next(ln for ln in log.splitlines() if "drainer: processor" in ln)
    assert line.startswith("AirflowException: drainer: processor")
    assert "always_fails: this processor has a bug" in line
    assert "(exit 2: fix what it names; the next run resumes" in line
    # the processor is fixed in the drains file; the next run resumes the same plan
    body = yaml.safe_load(airflow_drains.path.read_text())
    body["drains"][drain.name]["processor"] = PER_RECORD
    airflow_drains.path.write_text(yaml.safe_dump(body))
    second = af.trigger(drain.name)
    assert af.wait_run(drain.name, second)["state"] == "success"
    # the failed run's plan is another DAG run's (another launch key): finished first, with
    # its own ranges, then the levels are planned anew (nothing left for that plan here)
    resumed, *_ = drainer_runs(drain)
    assert resumed.id == opened.id and resumed.status == "committed"
    assert resumed.attempts == 2
    summary = af.xcom(drain.name, second)
    assert summary["finished_first"]["run_id"] == opened.id
    assert summary["finished_first"]["drained"] == 150
    assert_each_record_once(drain, ends)


def test_maintenance_dag_maintains_the_drain_under_its_lease(airflow_stack, airflow_drains):
    af, drain = airflow_stack, airflow_drains.manual
    dag_id = f"{drain.name}_table_maintenance"
    run_id = af.trigger(dag_id)
    run = af.wait_run(dag_id, run_id)
    assert run["state"] == "success", af.task_log(dag_id, run_id, 1, task_id="maintain")
    done = af.xcom(dag_id, run_id, task_id="maintain")
    assert done["partitions_after"] <= done["partitions_before"]
    assert {"folds", "runs_pruned"} <= set(done)
    assert "table" not in done  # a Postgres sink: folds, no table compaction
