"""Runs share one Spark Connect session: its Python workers stay warm and the server keeps one
worker daemon per version of the code, not one more per run."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from drainer.services import connect, process
from drainer.settings import load_settings
from drainer.spark.connect_session import shared_session_id, with_session_id
from drainer.spark.endpoint import client_url
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from spark_jobs.session import get_spark, is_connect, session_code

# it counts the server's worker daemons, which another process's session would add to, and
# touches a source file, which gives every process a new session
pytestmark = pytest.mark.serial


def _server_daemons() -> set[int]:
    """The Python worker daemons the local Connect server has started."""
    server = Path(f"/proc/{connect_pid()}/task")
    children: set[int] = set()
    for task in server.iterdir():
        children.update(int(p) for p in (task / "children").read_text().split())
    daemons = (b"pyspark.daemon", connect.WORKER_DAEMON.encode())
    return {pid for pid in children if any(d in _cmdline(pid) for d in daemons)}


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


def _require_connect() -> None:
    """These tests prove the Connect session's behaviour: a server that is down fails them."""
    if not is_connect(get_spark(load_settings())):
        pytest.fail(
            "no Spark Connect server answered, so the session under test does not exist: "
            "start it with `drainer services up` (or set SPARK_REMOTE) and run again"
        )


def test_runs_share_one_session_and_its_workers(make_drain, spark):
    if load_settings().spark_remote:
        pytest.skip("SPARK_REMOTE names another server: its daemons cannot be counted here")
    _require_connect()
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


def test_workers_are_forked_with_drainers_task_modules_imported(spark):
    """The local server's Python workers come from drainer's daemon, which imported the sink
    and record-mode modules before forking: a new worker does not import them per task. Its
    pyspark is the installed one, so no task re-reads Spark's archives (worker_daemon)."""
    if load_settings().spark_remote:
        pytest.skip("SPARK_REMOTE names another server, started with its own daemon")
    _require_connect()
    from pyspark.sql import functions as F

    def in_worker(_: int) -> str:
        import os
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as parent:
            daemon = parent.read().replace(b"\0", b" ").decode()
        import zipimport

        import pyspark

        zips = [
            path
            for path, finder in sys.path_importer_cache.items()
            if isinstance(finder, zipimport.zipimporter) and "py4j" not in path
        ]
        loaded = f"{'spark_jobs.sinks.postgres' in sys.modules}|{'spark_jobs.modes' in sys.modules}"
        return f"{daemon}|{loaded}|{pyspark.__file__}|{zips}"

    row = spark.range(1).select(F.udf(in_worker, "string")(F.lit(0))).first()
    assert row is not None
    daemon, sink, modes, pyspark_file, zips = str(row[0]).split("|")
    assert f"-m {connect.WORKER_DAEMON}" in daemon, daemon
    assert (sink, modes) == ("True", "True")
    assert ".zip" not in pyspark_file and zips == "[]", (pyspark_file, zips)


def test_a_session_the_server_closed_is_replaced(make_drain, spark):
    """A shared session the server has closed (idle past its timeout, or released) cannot be
    reopened: the next run opens a new one and drains as usual."""
    _require_connect()
    drain = make_drain(levels=1, partitions=1, budget=100)
    # other settings, so this test's session is not the one the suite's processes share
    other = {"DRAINER_SHUFFLE_PARTITIONS": "7"}
    _drain_once(drain, shared=True, **other)
    settings = dataclasses.replace(load_settings(), shuffle_partitions="7")
    endpoint = settings.spark_endpoint
    directory, code = settings.home / "spark-sessions", session_code(settings)
    closed = shared_session_id(directory, endpoint, code)  # the one the run used
    url = with_session_id(client_url(endpoint, settings.connect_token), closed)
    SparkSession.builder.remote(url).create().stop()  # released

    _drain_once(drain, shared=True, **other)
    assert shared_session_id(directory, endpoint, code) != closed


# a process with two sessions (another sink's catalogs), the first one's session gone on the server
_TWO_SESSIONS = """
from pyspark.sql.types import DataType
from drainer.settings import load_settings
from spark_jobs.session import get_spark

settings = load_settings()
first = get_spark(settings)
run_session = get_spark(settings, sink_conf={"spark.drainer.test.other": "catalog"})
assert run_session is not first
first.client.release_session()  # as a restarted server forgets it; the client does not know
print(DataType.fromDDL("id string, v long").simpleString())
"""


def test_pysparks_helpers_use_the_session_get_spark_handed_out_last():
    """pyspark parses a DDL string with "the active session", which a Connect client became only
    when none was set. A run after a server restart got a new session for its sink while the
    process's first one, dead but not yet found so, stayed active: its schema parse failed with
    NO_ACTIVE_SESSION. Here the first session is released on the server instead of restarting it."""
    _require_connect()
    own = {**os.environ, "DRAINER_SPARK_SHARED_SESSION": "false"}  # none the suite shares
    done = subprocess.run(
        [sys.executable, "-c", _TWO_SESSIONS], capture_output=True, text=True, timeout=300, env=own
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("struct<id:string,v:bigint>")


def test_a_remote_servers_code_change_gets_a_new_session(tmp_path):
    """With SPARK_REMOTE the workers import the server's copy of the code. Before: the session
    was keyed by the client's files only, so code changed on the server kept the old session
    and the workers' stale imports. The client here runs a copy of drainer; the server (this
    worktree's, addressed as remote) gets one of its files touched."""
    import shutil

    _require_connect()
    settings = load_settings()
    repo = Path(__file__).resolve().parents[2]
    client = tmp_path / "client"
    for package in ("drainer", "spark_jobs"):
        shutil.copytree(
            repo / package, client / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    env = {
        **os.environ,
        "PYTHONPATH": str(client),
        "SPARK_REMOTE": client_url(settings.spark_endpoint, settings.connect_token),
        "DRAINER_HOME": str(tmp_path / "home"),
        "DRAINER_CONFIG": str(tmp_path / "none.yaml"),
    }
    script = (
        f"import spark_jobs.session as s; assert s.__file__.startswith({str(client)!r}); "
        "from drainer.settings import load_settings; "
        "print(s.get_spark(load_settings()).session_id)"
    )

    def session_id() -> str:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            cwd=tmp_path,  # not the worktree: `-c` puts the working directory on sys.path
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.split()[-1]

    first = session_id()
    assert session_id() == first  # nothing changed: shared
    server_file = repo / "drainer" / "services" / "__init__.py"
    os.utime(server_file)  # the server's code changed; the client's copy did not
    assert session_id() != first
