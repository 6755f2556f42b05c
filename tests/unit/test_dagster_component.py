"""`drainer.dagster.DrainsComponent` (no services: definitions load without Kafka or Spark).

The component's attributes resolve from YAML as a `defs.yaml` gives them, and build the same
definitions as the factory; a drain's `max_wait` becomes Dagster's time-window freshness policy.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from dagster_project import drain_definitions
from dagster_project.freshness import drain_freshness
from drainer.config import DrainConfig
from drainer.dagster import DrainsComponent
from drainer.errors import ConfigError
from tests.support.drains import drain_body


@pytest.fixture
def drains_file(tmp_path: Path) -> Path:
    """`orders` (3 levels, a cron schedule, max_wait 10m) and `clicks` (2 levels, neither)."""
    path = tmp_path / "drains.yaml"
    drains = {
        "orders": drain_body("orders", schedule="*/5 * * * *", max_wait="10m"),
        "clicks": drain_body("clicks", levels=2),
    }
    path.write_text(yaml.safe_dump({"drains": drains}))
    return path


def names(defs: dg.Definitions) -> dict[str, set[str]]:
    """Every definition by kind and name: what two ways of building a location must share."""
    graph = defs.resolve_asset_graph()
    return {
        "assets": {key.to_user_string() for key in graph.get_all_asset_keys()},
        "checks": {key.to_user_string() for key in graph.asset_check_keys},
        "jobs": {job.name for job in defs.resolve_all_job_defs()} - {"__ASSET_JOB"},
        "schedules": {s.name for s in defs.schedules or []},
        "sensors": {s.name for s in defs.sensors or []},
        "resources": set(defs.resources or {}),
    }


def component(attributes: str) -> DrainsComponent:
    return DrainsComponent.resolve_from_yaml(attributes)


def test_the_component_builds_the_factorys_definitions(drains_file):
    built = dg.build_defs_for_component(component(f"drains_file: {drains_file}"))
    dg.Definitions.validate_loadable(built)
    assert names(built) == names(drain_definitions(drains_file))
    assert names(built)["schedules"] == {
        "orders_schedule",
        "orders_table_maintenance_daily",
        "clicks_table_maintenance_daily",
    }
    assert built.resources["drainer"].drains_file == str(drains_file.resolve())


def test_selection_and_switches_leave_out_drains_schedules_and_sensors(drains_file):
    built = dg.build_defs_for_component(
        component(f"drains_file: {drains_file}\ndrains: [orders]\nschedules: false\nsensors: false")
    )
    assert names(built) | {"checks": set()} == {
        "assets": {"orders"},
        "checks": set(),
        "jobs": {"orders_job", "orders_table_maintenance"},  # launched by hand
        "schedules": set(),
        "sensors": set(),
        "resources": {"drainer"},
    }


def test_a_selection_naming_an_unknown_drain_says_which_drains_exist(drains_file):
    with pytest.raises(ConfigError, match=r"\['views'\].*it has: clicks, orders"):
        dg.build_defs_for_component(component(f"drains_file: {drains_file}\ndrains: [views]"))


def test_resource_settings_are_values_or_variables_read_when_a_run_starts(drains_file, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker-a:9092")
    built = dg.build_defs_for_component(
        component(
            f"drains_file: {drains_file}\n"
            "resource:\n"
            "  spark_remote: sc://spark.internal:15002\n"
            "  database_url: {env: TEAM_DRAINER_DB}\n"
            "  wait_seconds: 60\n"
        )
    )
    resource = built.resources["drainer"]
    assert resource.spark_remote == "sc://spark.internal:15002"
    assert resource.database_url == dg.EnvVar("TEAM_DRAINER_DB")  # never its value in the UI
    assert resource.kafka_bootstrap_servers == dg.EnvVar("KAFKA_BOOTSTRAP_SERVERS")  # unset here
    assert resource.wait_seconds == 60


def test_an_unknown_attribute_is_refused_when_the_yaml_loads(drains_file):
    with pytest.raises(Exception, match="schedule_switch"):
        component(f"drains_file: {drains_file}\nschedule_switch: false")


def _drain(max_wait: object) -> DrainConfig:
    return DrainConfig.model_validate({**drain_body("d", max_wait=max_wait), "name": "d"})


@pytest.mark.parametrize(
    ("max_wait", "fail", "warn"),
    [
        (None, None, None),
        ("1h", timedelta(hours=1), timedelta(minutes=30)),
        ({0: "1h", 2: "10m"}, timedelta(minutes=10), timedelta(minutes=5)),  # the strictest level
        ("90s", timedelta(seconds=90), timedelta(minutes=1)),  # Dagster's shortest window
        ("1m", timedelta(minutes=1), None),  # no warn window shorter than the fail window
        ("20s", timedelta(minutes=1), None),  # Dagster refuses windows under a minute
    ],
)
def test_max_wait_becomes_a_time_window_freshness_policy(max_wait, fail, warn):
    policy = drain_freshness(_drain(max_wait))
    if fail is None:
        assert policy is None
        return
    assert policy == dg.FreshnessPolicy.time_window(fail_window=fail, warn_window=warn)


def test_the_drains_asset_carries_its_freshness_policy(drains_file):
    defs = drain_definitions(drains_file)
    orders = defs.resolve_assets_def("orders").specs_by_key[dg.AssetKey("orders")]
    clicks = defs.resolve_assets_def("clicks").specs_by_key[dg.AssetKey("clicks")]
    assert orders.freshness_policy == dg.FreshnessPolicy.time_window(
        fail_window=timedelta(minutes=10), warn_window=timedelta(minutes=5)
    )
    assert clicks.freshness_policy is None
    # the policy leaves the asset's checks, partitions and backfill policy as they were
    asset = defs.resolve_assets_def("orders")
    assert len(asset.check_keys) == 4 and asset.backfill_policy == dg.BackfillPolicy.single_run()
    assert asset.partitions_def.get_partition_keys() == ["0", "1", "2"]


def test_every_attribute_is_described_where_declared_and_in_docs():
    from drainer.dagster import ResourceSettings

    docs = (Path(__file__).resolve().parents[2] / "docs" / "dagster.md").read_text()
    for model in (DrainsComponent, ResourceSettings):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            assert f"  {name}: " in docs, f"docs/dagster.md's defs.yaml example lacks `{name}`"
