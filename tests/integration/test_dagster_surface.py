"""The Dagster surface: workspace loads, schedule asks for one all-levels run, sensor, checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from drainer.kafka.producer import synthetic_records
from tests.support.stack import produce_records

REPO = Path(__file__).resolve().parents[2]


def dagster_cli(*args: str, cwd: Path, env: dict[str, str]) -> str:
    """Run the `dagster` command; its output, after asserting that it succeeded."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_workspace_loads_with_dagster_cli(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    dagster_cli("definitions", "validate", "-w", "workspace.yaml", cwd=REPO, env=env)


def test_schedule_requests_one_run_over_all_levels(make_drain):
    from dagster_project.definitions import RANGE_END, RANGE_START, build_definitions

    drain = make_drain(schedule="*/10 * * * *")
    defs = build_definitions()
    schedule = defs.resolve_schedule_def(f"{drain.name}_schedule")
    assert schedule.cron_schedule == "*/10 * * * *"
    requests = schedule.evaluate_tick(dg.build_schedule_context()).run_requests
    assert len(requests) == 1
    assert requests[0].tags[RANGE_START] == "0" and requests[0].tags[RANGE_END] == "2"
    job = defs.resolve_job_def(f"{drain.name}_job")
    assert job.partitions_def.get_partition_keys() == ["0", "1", "2"]


def test_lag_sensor_fires_only_above_threshold(make_drain):
    from dagster_project.definitions import build_definitions

    drain = make_drain(lag_threshold=500)
    defs = build_definitions()
    sensor = defs.resolve_sensor_def(f"{drain.name}_lag_sensor")
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources=defs.resources)
        quiet = sensor.evaluate_tick(context)
        assert not quiet.run_requests and "backlog 0" in quiet.skip_message
        produce_records(drain, synthetic_records(600), level=1)
        busy = sensor.evaluate_tick(context)
        assert len(busy.run_requests) == 1


def test_job_run_over_a_level_range_drains_those_levels_once_and_checks_pass(make_drain, spark):
    from dagster_project.definitions import RANGE_END, RANGE_START, build_definitions

    drain = make_drain()
    for level in range(3):
        produce_records(drain, synthetic_records(400, seed=level), level=level)
    defs = build_definitions()
    job = defs.resolve_job_def(f"{drain.name}_job")
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(
            instance=instance,
            resources={"drainer": defs.resources["drainer"]},
            tags={RANGE_START: "0", RANGE_END: "1"},
        )
        assert result.success
        by_level = {
            m.partition: {key: value.value for key, value in m.metadata.items()}
            for m in result.asset_materializations_for_node(drain.name)
        }
        assert set(by_level) == {"0", "1"}  # level 2 was not part of the backfill
        assert by_level["0"]["drained"] == by_level["1"]["drained"] == 400
        # budget 7000 shared by levels 0 and 1 only (weights 1 and 2)
        assert by_level["0"]["reserved"] == 2333 and by_level["1"]["reserved"] == 4667
        assert by_level["0"]["run_drained"] == by_level["1"]["run_drained"] == 800
        for key in ("allocated", "planned", "fill_ratio", "backlog_before", "backlog_after"):
            assert key in by_level["0"]
        assert by_level["0"]["lost_to_retention"] == 0 and by_level["0"]["dead_letters"] == 0
        tags = instance.get_run_by_id(result.run_id).tags
        assert tags["drainer/run_id"] == str(by_level["0"]["drain_run_id"])
        # the drainer's own log lines are in the step's logs
        messages = [e.user_message for e in instance.all_logs(result.run_id)]
        assert any("drainer.lifecycle.run: planned run" in m for m in messages), messages
        assert any("drainer.lifecycle.run: run " in m and "committed" in m for m in messages)
        # the checks ran in the drain's step: one step, no process of its own
        assert [e.step_key for e in result.get_step_success_events()] == [drain.name]
        evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
        assert evaluations["dead_letters_not_growing"].passed
        assert evaluations["offsets_never_backwards"].passed
        assert evaluations["lag_within_sla"].passed
        assert evaluations["lag_within_sla"].metadata["level_2_backlog"].value == 400


TEAM_LOCATION = """
import dagster as dg

from dagster_project import drain_definitions


@dg.asset
def revenue() -> int:
    return 42


defs = dg.Definitions.merge(drain_definitions({path!r}), dg.Definitions(assets=[revenue]))
"""


def test_team_code_location_loads_with_dagster_cli(tmp_path, make_drain):
    """A team's own location (a file outside this repository) takes a drains file's drains."""
    drain = make_drain(schedule="0 * * * *")
    team = tmp_path / "team_location.py"
    team.write_text(TEAM_LOCATION.format(path=os.environ["DRAINER_CONFIG"]))
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    env.pop("DRAINER_CONFIG")  # the team's file names its drains file itself
    dagster_cli("definitions", "validate", "-f", str(team), cwd=tmp_path, env=env)
    listed = dagster_cli("asset", "list", "-f", str(team), cwd=tmp_path, env=env)
    assert set(listed.split()) == {drain.name, "revenue"}
