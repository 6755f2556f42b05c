"""What crosses between Airflow and drainer (drainer.airflow.values): pure, no Airflow needed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainer.airflow.values import (
    EXTRA_VARIABLES,
    connection_variables,
    failure_line,
    launch_key,
    requested_levels,
    run_line,
    run_summary,
)
from drainer.errors import ConfigError, DrainBusy, ProcessorFailed
from drainer.lifecycle.results import LevelReport, RunResult
from drainer.settings import load_settings


def level(n: int, drained: int, read_bytes: int = 0, backlog_after: int = 0) -> LevelReport:
    return LevelReport(
        level=n,
        reserved=10,
        burst=0,
        allocated=10,
        backlog_before=drained + backlog_after,
        planned=drained,
        drained=drained,
        failed=0,
        dead_lettered=0,
        fill_ratio=1.0,
        backlog_after=backlog_after,
        read_bytes=read_bytes,
    )


def result(**overrides) -> RunResult:
    values = dict(
        run_id=7,
        drain="orders",
        levels=[level(2, 30, 3000, 5), level(0, 10, 1000)],
        resumed=False,
        attempt=1,
        duration_s=1.25,
        published_rows=40,
    )
    return RunResult(**(values | overrides))


def test_connection_fields_name_the_database_and_the_extra_the_other_services():
    found = connection_variables(
        "drainer_default",
        host="db.internal",
        port=5433,
        login="drainer",
        password="p@ss/word",
        schema="drains",
        extra={"kafka_bootstrap_servers": "broker:9092", "spark_remote": "sc://spark:15002"},
    )
    assert found == {
        "DRAINER_DATABASE_URL": "postgresql+psycopg://drainer:p%40ss%2Fword@db.internal:5433/drains",
        "KAFKA_BOOTSTRAP_SERVERS": "broker:9092",
        "SPARK_REMOTE": "sc://spark:15002",
    }
    # and drainer reads them as its own variables: the password survives the URL's quoting
    settings = load_settings(found)
    assert settings.bootstrap_servers == "broker:9092"
    assert settings.spark_remote == "sc://spark:15002"
    from sqlalchemy.engine import make_url

    assert make_url(settings.database_url).password == "p@ss/word"


def test_a_connection_without_host_leaves_the_database_to_the_environment():
    assert connection_variables("c", extra={"warehouse": "s3://lake", "drains_file": ""}) == {
        "DRAINER_WAREHOUSE": "s3://lake"
    }
    assert connection_variables("c") == {}


def test_unknown_extra_field_and_a_database_named_twice_are_config_errors():
    with pytest.raises(ConfigError, match=r"connection c: unknown extra field\(s\) \['brokers'\]"):
        connection_variables("c", extra={"brokers": "x"})
    with pytest.raises(ConfigError, match="names its database twice"):
        connection_variables("c", host="h", extra={"database_url": "postgresql://h/d"})
    assert set(EXTRA_VARIABLES.values()) <= {
        "KAFKA_BOOTSTRAP_SERVERS",
        "DRAINER_DATABASE_URL",
        "SPARK_REMOTE",
        "SPARK_MASTER",
        "DRAINER_CONFIG",
        "DRAINER_WAREHOUSE",
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ([], None),
        ("", None),
        ([2, 0], [0, 2]),
        ([0, 0, 2], [0, 2]),
        ("0,2", [0, 2]),
        (["1"], [1]),
    ],
)
def test_levels_param_becomes_the_levels_to_drain(value, expected):
    assert requested_levels(value, "orders", 3) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([3], r"levels \[3\] do not exist \(it has levels 0..2\)"),
        ([-1], r"levels \[-1\] do not exist"),
        (["x"], r"levels \['x'\] is not a list of levels"),
        (5, "is not a list of levels"),
    ],
)
def test_a_wrong_levels_param_names_the_drain_and_the_fix(value, message):
    with pytest.raises(ConfigError, match=message):
        requested_levels(value, "orders", 3)


@given(st.lists(st.integers(min_value=0, max_value=4), min_size=1))
def test_any_list_of_existing_levels_is_drained_sorted_and_once(levels):
    assert requested_levels(levels, "d", 5) == sorted(set(levels))


def test_run_summary_has_records_and_bytes_per_level_backlog_and_the_sink_commit():
    commit = {"format": "delta", "location": "/lake/t", "version": 4}
    summary = run_summary(result(table_commit=commit))
    assert summary["run_id"] == 7 and summary["drain"] == "orders" and summary["drained"] == 40
    assert summary["levels"] == {
        "0": {"records": 10, "bytes": 1000, "planned": 10, "backlog_after": 0, "dead_lettered": 0},
        "2": {"records": 30, "bytes": 3000, "planned": 30, "backlog_after": 5, "dead_lettered": 0},
    }
    assert summary["backlog_after"] == 5
    assert summary["sink_commit"] == commit
    assert run_summary(result())["sink_commit"] is None  # a Postgres sink commits in Postgres
    finished = run_summary(result(finished=result(run_id=6)))
    assert finished["finished_first"]["run_id"] == 6


def test_run_summary_is_json_as_xcom_stores_it():
    import json

    summary = run_summary(result(finished=result(run_id=6), warnings=["mirror failed"]))
    assert json.loads(json.dumps(summary)) == summary


def test_run_line_is_the_cli_s():
    assert run_line(result()) == "run 7 of orders: 40 records in 1.2 s; 40 sink rows published"
    assert "(resumed)" in run_line(result(resumed=True))


def test_failure_line_is_one_line_with_the_exit_code_and_its_meaning():
    line = failure_line(ProcessorFailed("processor x failed: ValueError: bad"))
    assert line == (
        "drainer: processor x failed: ValueError: bad (exit 2: fix what it names; the next run "
        "resumes any open plan with the same ranges)"
    )
    assert "(exit 3: another run holds the drain; retry later)" in failure_line(DrainBusy("busy"))
    secret = failure_line(ConfigError("cannot reach postgresql://u:hunter2@db/x"), ["hunter2"])
    assert "hunter2" not in secret and "\n" not in secret


def test_launch_key_is_one_per_dag_run():
    assert launch_key("orders", "manual__2026") == "airflow-run:orders:manual__2026"
