"""A running Connect server of ours is reused only when it can serve this environment's runs:
what it was started with is read back from its `started_with` line."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from drainer.services import connect
from drainer.settings import Settings, load_settings


@pytest.fixture
def paths(tmp_path: Path) -> connect.ConnectPaths:
    paths = connect.ConnectPaths(tmp_path)
    paths.root.mkdir(exist_ok=True)
    return paths


@pytest.fixture
def settings() -> Settings:
    """This shell's settings with no PYTHONPATH of its own (the suite's conftest sets one)."""
    return dataclasses.replace(load_settings(), python_path="")


def _started(paths: connect.ConnectPaths, line: str) -> None:
    paths.started_with.write_text(line + "\n")


def test_a_server_this_environment_started_is_reused(paths, settings) -> None:
    _started(paths, connect.started_with("local[*]", ("delta", "iceberg"), settings))
    assert connect.restart_reason(paths, settings, ("delta",)) is None
    assert connect.restart_reason(paths, settings, ()) is None


def test_a_server_of_another_pyspark_is_restarted(paths, settings, monkeypatch) -> None:
    """`pip install -U pyspark` replaces the jars a running server still loads classes from."""
    monkeypatch.setattr(connect, "pyspark_version", lambda: "4.0.0")
    _started(paths, connect.started_with("local[*]", ("delta",), settings))
    monkeypatch.undo()
    reason = connect.restart_reason(paths, settings, ("delta",))
    assert reason is not None and connect.pyspark_version() in reason


def test_a_server_without_a_table_formats_jars_is_restarted(paths, settings) -> None:
    _started(paths, connect.started_with("local[*]", ("delta",), settings))
    assert connect.restart_reason(paths, settings, ("delta", "iceberg")) == (
        "it lacks the jars of iceberg"
    )


def test_a_server_of_another_pythonpath_is_reused(paths, settings) -> None:
    """Before: another PYTHONPATH restarted the shared server (under other users' runs, once);
    a drain's own modules now travel with its session (drainer.spark.shipped_modules)."""
    other = dataclasses.replace(settings, python_path="/elsewhere/checkout")
    _started(paths, connect.started_with("local[*]", ("delta",), other))
    assert connect.restart_reason(paths, settings, ("delta",)) is None
    assert "restarts the server" not in connect._detail(paths, settings, "")


def test_a_server_of_another_environment_is_restarted_naming_it(paths, settings) -> None:
    line = connect.started_with("local[*]", ("delta",), settings)
    _started(paths, line.replace(f"env={sys.prefix} ", "env=/other/venv "))
    reason = connect.restart_reason(paths, settings, ("delta",))
    assert reason is not None and reason.startswith(
        f"its Python workers run the environment /other/venv, this shell {sys.prefix}"
    )


def test_a_run_holds_the_server_and_a_restart_waits_or_names_it(tmp_path) -> None:
    from drainer.services import connect_users

    with connect_users.using(tmp_path, "run 4 of drain orders"):
        assert connect_users.current_users(tmp_path) == [
            f"run 4 of drain orders (pid {os.getpid()})"
        ]
        with connect_users.exclusive(tmp_path, wait_s=0.0) as got:
            assert not got
    assert connect_users.current_users(tmp_path) == []
    with connect_users.exclusive(tmp_path, wait_s=0.0) as got:
        assert got
    (tmp_path / connect_users.USERS / "999999999-dead").write_text("run 1 of drain gone")
    assert connect_users.current_users(tmp_path) == []  # a killed run's name is not a user


@pytest.mark.parametrize(
    "dropped",
    ["auth=token", "logs=no-plans", connect.ROLLING_LOG, connect.OWN_SCRATCH, connect.POOLS_MARK],
)
def test_a_server_an_older_drainer_started_is_restarted(paths, settings, dropped) -> None:
    line = connect.started_with("local[*]", ("delta",), settings)
    _started(paths, line.replace(f" {dropped} ", " "))
    assert connect.restart_reason(paths, settings, ("delta",)) is not None


def test_a_server_that_left_no_record_is_restarted(paths, settings) -> None:
    assert connect.restart_reason(paths, settings, ()) is not None


def test_a_server_without_this_version_of_the_kafka_sink_producer_is_restarted(
    paths, settings
) -> None:
    """The Kafka sink's server producer is on the JVM's class path: only a restart adds it."""
    _started(paths, connect.started_with("local[*]", ("delta",), settings))
    new = {"kafka": "drainer-kafka-sink-new.jar"}
    reason = connect.restart_reason(paths, settings, ("delta",), new)
    assert reason is not None and "kafka sink" in reason
    older = connect.started_with(
        "local[*]", ("delta",), settings, {"kafka": "drainer-kafka-sink-old.jar"}
    )
    assert "kafka_sink=drainer-kafka-sink-old.jar" in older  # as servers started before record it
    _started(paths, older)
    assert connect.restart_reason(paths, settings, ("delta",), new)
    # without a JDK there is no jar to want: a server started with one serves as well
    assert connect.restart_reason(paths, settings, ("delta",)) is None
