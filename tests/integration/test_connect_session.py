"""Runs share one Spark Connect session: its Python workers stay warm and the server keeps one
worker daemon per version of the code, not one more per run."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from drainer.services import connect, process
from drainer.services.connect_session import session_file, with_session_id
from drainer.settings import load_settings
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from spark_jobs.session import get_spark, is_connect, session_code


def _server_daemons() -> set[int]:
    """The Python worker daemons the local Connect server has started."""
    server = Path(f"/proc/{connect_pid()}/task")
    children: set[int] = set()
    for task in server.iterdir():
        children.update(int(p) for p in (task / "children").read_text().split())
    return {pid for pid in children if b"pyspark.daemon" in _cmdline(pid)}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def connect_pid() -> int:
    pid = process.our_pid(connect.ConnectPaths.local(load_settings()).pid_file, connect.MARKER)
    assert pid is not None, "the local Connect server is not running"
    return pid


def _drain_once(drain, shared: bool, **env_vars: str) -> None:
    produced = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "produce", drain.name, "--level", "0"]
        + ["--count", "20"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert produced.returncode == 0, produced.stderr
    env = {**os.environ, "DRAINER_SPARK_SHARED_SESSION": str(shared).lower(), **env_vars}
    run = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "run", drain.name],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert "drained 20" in run.stdout or "20 records" in run.stdout, run.stdout


def test_runs_share_one_session_and_its_workers(make_drain, spark):
    if not is_connect(get_spark()) or load_settings().spark_remote:
        pytest.skip("needs the local Connect server that `drainer services up` runs")
    drain = make_drain(
        levels=1,
        partitions=1,
        budget=100,
        mode="record",
        handler="spark_jobs.examples:record_echo",
        output_schema=RECORD_ECHO_SCHEMA,
    )
    _drain_once(drain, shared=True)  # the first run may open this code's session
    before = _server_daemons()
    for _ in range(3):
        _drain_once(drain, shared=True)
    assert _server_daemons() == before  # the same daemon, the same warm workers

    # a session per run: each run leaves the server one more daemon (the leak shared avoids)
    for _ in range(2):
        _drain_once(drain, shared=False)
    assert len(_server_daemons() - before) == 2


def test_a_session_the_server_closed_is_replaced(make_drain, spark):
    """A shared session the server has closed (idle past its timeout, or released) cannot be
    reopened: the next run opens a new one and drains as usual."""
    if not is_connect(get_spark()):
        pytest.skip("needs a Spark Connect server")
    drain = make_drain(levels=1, partitions=1, budget=100)
    # other settings, so this test's session is not the one the suite's processes share
    other = {"DRAINER_SHUFFLE_PARTITIONS": "7"}
    _drain_once(drain, shared=True, **other)
    settings = dataclasses.replace(load_settings(), shuffle_partitions="7")
    endpoint = settings.spark_endpoint
    file = session_file(settings.home / "spark-sessions", endpoint, session_code(settings))
    closed = json.loads(file.read_text())["id"]
    SparkSession.builder.remote(with_session_id(endpoint, closed)).create().stop()  # released

    _drain_once(drain, shared=True, **other)
    assert json.loads(file.read_text())["id"] != closed
