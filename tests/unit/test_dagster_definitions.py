"""The Dagster code location by name, a team's location built on `drain_definitions`, and the
resource's connection settings (no services needed: definitions load without Kafka or Spark)."""

import importlib
from pathlib import Path

import dagster as dg
import pytest
import yaml

from dagster_project import DrainerResource, drain_definitions
from drainer.settings import load_settings
from tests.support.drains import drain_body


@pytest.fixture
def drains_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two drains: `orders` (3 levels, a cron schedule) and `clicks` (2 levels, none)."""
    path = tmp_path / "drains.yaml"
    drains = {
        "orders": drain_body("orders", schedule="*/5 * * * *"),
        "clicks": drain_body("clicks", levels=2),
    }
    path.write_text(yaml.safe_dump({"drains": drains}))
    monkeypatch.setenv("DRAINER_CONFIG", str(path))
    return path


CHECK_NAMES = {
    "lag_within_sla",
    "dead_letters_not_growing",
    "offsets_never_backwards",
    "level_health",
}


def test_code_location_has_every_definition_by_name(drains_file):
    import dagster_project.definitions

    defs = importlib.reload(dagster_project.definitions).defs  # the location workspace.yaml loads
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert {key.to_user_string() for key in graph.get_all_asset_keys()} == {"orders", "clicks"}
    for name, levels in (("orders", ["0", "1", "2"]), ("clicks", ["0", "1"])):
        asset = defs.resolve_assets_def(name)
        assert asset.partitions_def.get_partition_keys() == levels
        assert {key.name for key in asset.check_keys} == CHECK_NAMES
        assert asset.backfill_policy == dg.BackfillPolicy.single_run()
        assert "drainer" in asset.required_resource_keys
    assert {job.name for job in defs.resolve_all_job_defs()} >= {"orders_job", "clicks_job"}
    assert defs.resolve_job_def("orders_job").executor_def is dg.in_process_executor
    assert {s.name for s in defs.schedules} == {  # clicks has no schedule of runs
        "orders_schedule",
        "orders_table_maintenance_daily",
        "clicks_table_maintenance_daily",
    }
    assert defs.resolve_schedule_def("orders_schedule").cron_schedule == "*/5 * * * *"
    assert {s.name for s in defs.sensors} == {"orders_lag_sensor", "clicks_lag_sensor"}
    assert defs.resolve_sensor_def("clicks_lag_sensor").job_name == "clicks_job"
    assert set(defs.resources) == {"drainer"}
    assert defs.executor is dg.in_process_executor


def test_team_location_merges_drains_with_its_own_asset(drains_file, tmp_path, monkeypatch):
    monkeypatch.delenv("DRAINER_CONFIG")  # the team names its file; no environment needed

    @dg.asset
    def revenue() -> int:
        return 42

    team = dg.Definitions.merge(drain_definitions(drains_file), dg.Definitions(assets=[revenue]))
    dg.Definitions.validate_loadable(team)
    keys = {key.to_user_string() for key in team.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {"orders", "clicks", "revenue"}
    assert {s.name for s in team.sensors} == {"orders_lag_sensor", "clicks_lag_sensor"}
    assert team.executor is None  # the team keeps its own executor choice
    # the runs read the file the team named, wherever they start
    assert team.resources["drainer"].drains_file == str(drains_file.resolve())
    # the team's asset materializes in the merged location beside the drains
    result = dg.materialize([team.resolve_assets_def("revenue")])
    assert result.success and result.output_for_node("revenue") == 42


def test_two_drains_files_need_their_own_locations(drains_file, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"drains": {"audit": drain_body("audit")}}))
    with pytest.raises(dg.DagsterInvariantViolationError, match="'drainer'"):
        dg.Definitions.merge(drain_definitions(drains_file), drain_definitions(other))


def test_connection_settings_are_env_vars_resolved_when_a_run_starts(drains_file, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker-a:9092")
    monkeypatch.delenv("DRAINER_DATABASE_URL", raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgresql://team@db-a/drains")
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    resource = drain_definitions().resources["drainer"]
    assert isinstance(resource.kafka_bootstrap_servers, dg.EnvVar)
    assert resource.kafka_bootstrap_servers.env_var_name == "KAFKA_BOOTSTRAP_SERVERS"
    assert resource.database_url.env_var_name == "DATABASE_URL"
    assert resource.spark_remote is None  # unset: drainer's own default, not a failing EnvVar

    seen: dict[str, str] = {}

    @dg.asset
    def probe(drainer: DrainerResource) -> None:
        settings = drainer.settings()
        seen.update(kafka=settings.bootstrap_servers, db=settings.database_url)
        # handed to the run, never set in the process's environment
        seen["process_kafka"] = load_settings().bootstrap_servers

    # the value is read when the run starts, not when the definitions loaded
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker-b:9092")
    assert dg.materialize([probe], resources={"drainer": resource}).success
    assert seen == {
        "kafka": "broker-b:9092",
        "db": "postgresql+psycopg://team@db-a/drains",
        "process_kafka": "broker-b:9092",
    }
    # a launchpad override wins over the environment, for that run only
    override = {"resources": {"drainer": {"config": {"kafka_bootstrap_servers": "broker-c:9092"}}}}
    assert dg.materialize([probe], resources={"drainer": resource}, run_config=override).success
    assert seen["kafka"] == "broker-c:9092"
    assert seen["process_kafka"] == "broker-b:9092"  # the process's own was never swapped
