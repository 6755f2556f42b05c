"""A drains file rendered as Airflow DAGs (drainer.airflow.drain_dags): no services needed.

Skipped where Airflow is not installed (`make unit-all`'s per-interpreter virtualenvs install
only `.[dev]`; the main one has the `airflow` extra).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

pytest.importorskip("airflow.sdk", reason="the `airflow` extra is not installed")

from drainer.airflow import get_provider_info  # noqa: E402
from drainer.airflow.dags import drain_dags  # noqa: E402
from drainer.airflow.operators import DrainOperator, MaintainOperator  # noqa: E402
from drainer.errors import ConfigError  # noqa: E402
from tests.support.drains import drain_body  # noqa: E402


@pytest.fixture
def drains_file(tmp_path: Path) -> Path:
    """`orders` (3 levels, every 5 minutes, a Postgres sink) and `clicks` (2 levels, no
    schedule, a Delta table under the warehouse)."""
    path = tmp_path / "drains.yaml"
    drains = {
        "orders": drain_body("orders", schedule="*/5 * * * *"),
        "clicks": drain_body("clicks", levels=2, sink={"type": "delta", "path": "clicks_table"}),
    }
    path.write_text(yaml.safe_dump({"drains": drains}))
    return path


@pytest.fixture
def dags(drains_file, monkeypatch, tmp_path):
    monkeypatch.setenv("DRAINER_WAREHOUSE", str(tmp_path / "lake"))
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://u:secret@db.internal:5433/drains")
    return drain_dags(drains_file)


def test_one_dag_per_drain_and_one_maintenance_dag_each(dags):
    assert sorted(dags) == [
        "clicks",
        "clicks_table_maintenance",
        "orders",
        "orders_table_maintenance",
    ]


def test_a_drain_dag_has_its_cron_one_run_at_a_time_no_catchup_and_a_levels_param(dags):
    orders = dags["orders"]
    assert orders.timetable.expression == "*/5 * * * *"
    assert orders.max_active_runs == 1 and orders.catchup is False
    param = orders.params.get_param("levels")
    assert param.value == []
    assert param.schema["type"] == "array"
    assert param.schema["items"] == {"type": "integer", "minimum": 0, "maximum": 2}
    assert dags["clicks"].params.get_param("levels").schema["items"]["maximum"] == 1
    (task,) = orders.tasks
    assert isinstance(task, DrainOperator)
    assert (task.drain, task.levels, task.retries) == ("orders", None, 2)
    assert task.retry_delay == timedelta(minutes=1)


def test_the_outlet_asset_is_the_sink_table_without_credentials(dags, tmp_path):
    (orders,) = dags["orders"].tasks[0].outlets
    assert orders.uri == "postgres://db.internal:5433/drains/public/orders_out"
    assert "secret" not in str(orders)
    (clicks,) = dags["clicks"].tasks[0].outlets
    assert clicks.uri == (tmp_path / "lake" / "clicks_table").as_uri()


def test_the_maintenance_dag_is_daily(dags):
    upkeep = dags["orders_table_maintenance"]
    assert upkeep.timetable.expression == "0 3 * * *"
    (task,) = upkeep.tasks
    assert isinstance(task, MaintainOperator) and task.drain == "orders"


def test_unscheduled_selected_and_default_args(drains_file):
    dags = drain_dags(drains_file, select=["orders"], schedules=False, default_args={"retries": 0})
    assert sorted(dags) == ["orders", "orders_table_maintenance"]
    assert not any(dag.timetable.can_be_scheduled for dag in dags.values())
    assert dags["orders"].tasks[0].retries == 0


def test_selecting_an_unknown_drain_names_it_and_the_known_ones(drains_file):
    with pytest.raises(ConfigError, match=r"\['nope'\] .* \(it has: clicks, orders\)"):
        drain_dags(drains_file, select=["nope"])


def test_provider_info_is_valid_for_airflow_and_names_the_connection_type():
    import json
    from importlib import resources

    import jsonschema

    info = get_provider_info()
    schema = json.loads(
        resources.files("airflow").joinpath("provider_info.schema.json").read_text()
    )
    jsonschema.validate(info, schema)
    assert info["package-name"] == "drainer"
    assert info["connection-types"] == [
        {"connection-type": "drainer", "hook-class-name": "drainer.airflow.hook.DrainerHook"}
    ]


def python_blocks(doc: Path) -> list[str]:
    blocks, current = [], None
    for line in doc.read_text().splitlines(keepends=True):
        if current is None and line.strip() == "```python":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_python_snippets_of_docs_airflow_run_as_written(monkeypatch):
    """Each block parses into DAGs in this checkout (its drains.yaml), as a dags file would."""
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    monkeypatch.delenv("DRAINER_CONFIG", raising=False)
    blocks = python_blocks(repo / "docs" / "airflow.md")
    assert len(blocks) == 2
    first: dict = {}
    exec(compile(blocks[0], "docs/airflow.md", "exec"), first)
    assert {"events", "events_lake", "events_table_maintenance"} <= set(first["dags"])
    second: dict = {}
    exec(compile(blocks[1], "docs/airflow.md", "exec"), second)
    assert second["buckets"] == first["dags"]["events"].tasks[0].outlets[0]


def test_the_hook_reads_a_drainer_connection_over_the_environment(monkeypatch, tmp_path):
    from drainer.airflow.hook import DrainerHook

    monkeypatch.setenv("SPARK_REMOTE", "sc://from-env:15002")
    monkeypatch.setenv(
        "AIRFLOW_CONN_DRAINER_DEFAULT",
        '{"conn_type": "drainer", "host": "pg.internal", "port": 5433, "login": "drainer", '
        '"password": "s3cret", "schema": "drains", '
        '"extra": {"kafka_bootstrap_servers": "broker:9092"}}',
    )
    hook = DrainerHook(drains_file=tmp_path / "drains.yaml")
    settings = hook.settings()
    assert settings.database_url == "postgresql+psycopg://drainer:s3cret@pg.internal:5433/drains"
    assert settings.bootstrap_servers == "broker:9092"
    assert settings.spark_remote == "sc://from-env:15002"  # left to the environment
    assert settings.config_path == (tmp_path / "drains.yaml").resolve()
    # what the operators blank out of a failure's line (and Airflow's masker of the logs)
    assert hook.secrets == ["s3cret", settings.database_url]


def test_without_the_connection_the_environment_alone_decides(monkeypatch):
    from drainer.airflow.hook import DrainerHook

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "env-broker:9092")
    hook = DrainerHook("no_such_connection")
    assert hook.settings().bootstrap_servers == "env-broker:9092"
    assert hook.secrets == []


def test_a_connection_with_an_unknown_extra_field_is_a_config_error(monkeypatch):
    from drainer.airflow.hook import DrainerHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_BAD", '{"conn_type": "drainer", "extra": {"bootstrap": "broker:9092"}}'
    )
    with pytest.raises(
        ConfigError, match=r"connection bad: unknown extra field\(s\) \['bootstrap'\]"
    ):
        DrainerHook("bad").settings()
