"""A real Spark standalone cluster: a master and a worker from the installed pyspark, on loopback.

Drains run as the CLI runs them, in their own processes: with SPARK_MASTER=spark://… (an
in-process driver whose executors run on the cluster's worker) in both modes, and through a
Spark Connect server attached to the cluster (SPARK_REMOTE). Each checks exact counts in the
sink, and that the cluster's master saw the application (the work did not run elsewhere).
The cluster comes up once per session; the classic runs go first, because a Connect server
holds the worker's cores for as long as it runs.

Issues 48's and 49's end-to-end cases run into Postgres through an in-process driver and into
Delta and Iceberg through the Connect server on the cluster: the executors are the cluster's
either way, and a cold driver JVM per run cost those cases 1-2.5 minutes each in the suite
(the routing case 97-141 s per format, where the server takes 23-37 s).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text

from drainer.kafka.producer import synthetic_records
from drainer.services import connect, process
from drainer.settings import load_settings
from drainer.spark.endpoint import client_url
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.drains import STACK_FORMATS
from tests.support.stack import get_engine, produce_records
from tests.support.user_modules import HANDLER_OUTPUT, write_user_handler

PRODUCED = {0: 700, 1: 500, 2: 300}
START_TIMEOUT_SECONDS = 90.0


@dataclass(frozen=True)
class Cluster:
    master_url: str
    ui_port: int

    def apps(self) -> dict:
        """The master's state (JSON API of its web UI): workers, running and completed apps."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.load(r)

    def app_names(self) -> list[str]:
        state = self.apps()
        return [a["name"] for a in state["activeapps"] + state["completedapps"]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    home = connect.spark_home()
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(home / "bin" / "spark-class"), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.fixture(scope="module")
def cluster(stack, tmp_path_factory) -> Iterator[Cluster]:
    """A standalone master and one worker (2 cores, 1 GiB), both on 127.0.0.1; stopped after
    this module, so the rest of the suite does not share two cores with its idle JVMs."""
    root = tmp_path_factory.mktemp("spark-cluster")
    settings = load_settings()
    env = connect.spark_env(settings, {"SPARK_WORKER_DIR": str(root / "work")})
    port, ui_port, worker_ui = _free_port(), _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    master = _spark_class(
        env,
        root / "master.log",
        "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port),
    )  # fmt: skip
    worker = _spark_class(
        env,
        root / "worker.log",
        "org.apache.spark.deploy.worker.Worker",
        master_url,
        "--host", "127.0.0.1", "--cores", "2", "--memory", "1g", "--webui-port", str(worker_ui),
    )  # fmt: skip
    try:
        found = Cluster(master_url, ui_port)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            try:
                if found.apps().get("aliveworkers", 0) >= 1:
                    break
            except (OSError, ValueError):
                # not listening yet, or listening before its JSON page is attached: just as it
                # starts, the web UI may answer /json/ with its HTML root page
                pass
            if (
                time.monotonic() > deadline
                or master.poll() is not None
                or worker.poll() is not None
            ):
                pytest.fail(
                    "the standalone cluster did not come up:\n"
                    + process.tail(root / "master.log", 20)
                    + "\n"
                    + process.tail(root / "worker.log", 20)
                )
            time.sleep(0.5)
        yield found
    finally:
        for proc in (worker, master):
            process.terminate(proc.pid, grace_seconds=15)


@pytest.fixture(scope="module")
def connect_on_cluster(cluster, tmp_path_factory) -> Iterator[str]:
    """A second Spark Connect server (own port), whose executors run on the cluster."""
    settings = load_settings()
    paths = connect.ConnectPaths(tmp_path_factory.mktemp("connect-on-cluster"))
    port = _free_port()
    started = connect.start(
        settings,
        paths,
        port,
        cluster.master_url,
        echo=lambda _: None,
        formats=STACK_FORMATS,  # the routing and state-table cases write Delta and Iceberg
        conf={"spark.executor.memory": "768m"},
    )
    try:
        yield started.address
    finally:
        if started.pid:
            process.terminate(started.pid, grace_seconds=15)


def _drain_in_process(drain, **spark_env: str) -> dict:
    """`drainer run --json` in its own process with the given SPARK_* variables only."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_REMOTE", "SPARK_MASTER", "SPARK_CONNECT_MODE_ENABLED")
    }
    env.update(spark_env)
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "run", drain.name, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    result["spark"] = done.stderr
    return result


def _produce(drain) -> None:
    for level, count in PRODUCED.items():
        produce_records(drain, synthetic_records(count, keys=7, seed=level), level=level)


def _scalar(sql: str) -> int:
    with get_engine().connect() as conn:
        return int(conn.scalar(text(sql)) or 0)


def test_dataframe_mode_on_a_standalone_cluster(make_drain, cluster):
    drain = make_drain(budget=5000)
    _produce(drain)
    before = cluster.app_names().count("drainer")
    result = _drain_in_process(drain, SPARK_MASTER=cluster.master_url)
    assert result["drained"] == sum(PRODUCED.values())
    assert f"on {cluster.master_url}" in result["spark"]
    assert cluster.app_names().count("drainer") == before + 1
    table = drain.sink.table
    assert _scalar(f'SELECT sum(records) FROM "{table}"') == sum(PRODUCED.values())
    for level, count in PRODUCED.items():
        assert _scalar(f'SELECT sum(records) FROM "{table}" WHERE level = {level}') == count


def test_routing_on_a_standalone_cluster(make_drain, lakehouse, cluster):
    """Issue 49's end-to-end case (tests/integration/test_routing.py) with the run's driver in
    the `drainer run` process and its executors on the cluster, into Postgres tables; the
    lakehouse formats take the same case through the Connect server attached to the cluster
    (below): the same executors, without a cold driver JVM per run."""
    result = _route(make_drain, "postgres", SPARK_MASTER=cluster.master_url)
    assert f"on {cluster.master_url}" in result["spark"]


def _route(make_drain, kind: str, **spark_env: str) -> dict:
    """Issue 49's case on the cluster: each type in its own table once (read back without
    Spark), one type new in the second run, the bad route value and the one past max_tables
    dead letters. The first run's result."""
    import uuid

    from test_routing import (
        BAD_NAME,
        DDL,
        FIRST,
        PAST_CAP,
        PER_PARTITION,
        assert_each_table_holds_exactly_its_records,
        dead_letters_of,
        produce,
        routed_sink,
    )

    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        value={"format": "json", "schema": DDL},
        bad_records="dead_letter",
        budget=40_000,
        sink=routed_sink(kind, suffix),
    )
    produce(drain, FIRST, extra=(BAD_NAME,))
    first = _drain_in_process(drain, **spark_env)
    assert first["drained"] >= 3 * 2 * PER_PARTITION
    assert_each_table_holds_exactly_its_records(drain, kind, suffix, FIRST, dead=1)
    produce(drain, [*FIRST, "signups"], extra=(PAST_CAP,))
    _drain_in_process(drain, **spark_env)
    assert_each_table_holds_exactly_its_records(drain, kind, suffix, [*FIRST, "signups"], dead=2)
    assert any("max_tables" in d["error"] for d in dead_letters_of(drain))
    return first


def test_record_mode_on_a_standalone_cluster(make_drain, cluster):
    drain = make_drain(
        budget=5000,
        mode="record",
        handler="spark_jobs.examples:record_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        ordering="key",
    )
    _produce(drain)
    before = cluster.app_names().count("drainer")
    result = _drain_in_process(drain, SPARK_MASTER=cluster.master_url)
    assert result["drained"] == sum(PRODUCED.values())
    assert cluster.app_names().count("drainer") == before + 1
    table = drain.sink.table
    assert _scalar(f'SELECT count(*) FROM "{table}"') == sum(PRODUCED.values())
    distinct = f'SELECT count(DISTINCT (topic, partition, "offset")) FROM "{table}"'
    assert _scalar(distinct) == sum(PRODUCED.values())


def _kafka_sink_from_the_driver(make_drain, **spark_env: str) -> dict:
    """A Kafka sink's run on the cluster: its tasks run in the worker's JVMs, which cannot share
    the run's one producer, so `producer: auto` produces from the driver, exactly once."""
    from kafka_output import output_topic, sources

    from drainer.observe.status import drain_status

    with output_topic() as out:
        drain = make_drain(
            budget=5000,
            processor="spark_jobs.examples:kafka_passthrough",
            sink={"type": "kafka", "topic": out},
        )
        _produce(drain)
        result = _drain_in_process(drain, **spark_env)
        assert result["drained"] == sum(PRODUCED.values())
        seen = sources(out)
        assert len(seen) == sum(PRODUCED.values()) and set(seen.values()) == {1}
        (run,) = drain_status(drain, load_settings())["runs"]
        assert run["table_commit"]["details"]["producer"] == "driver"
    return result


def test_a_kafka_sink_on_a_standalone_cluster_produces_from_the_driver(make_drain, cluster):
    _kafka_sink_from_the_driver(make_drain, SPARK_MASTER=cluster.master_url)


def test_state_tables_on_a_standalone_cluster(make_drain, lakehouse, cluster):
    """Issue 48's model case (test_state_tables) with the driver in the `drainer run` process
    and its executors on the cluster, into Postgres; the lakehouse formats take it through the
    Connect server attached to the cluster (below)."""
    before = cluster.app_names().count("drainer")
    result = _state_table(make_drain, "postgres", SPARK_MASTER=cluster.master_url)
    assert f"on {cluster.master_url}" in result["spark"]
    assert cluster.app_names().count("drainer") == before + 1


def _state_table(make_drain, fmt: str, **spark_env: str) -> dict:
    """Issue 48's case on the cluster: the collapse's window and the MERGE run in the worker's
    JVMs, the table read back without Spark equals the model, and the merge's counts are on
    the run's record. The run's result."""
    from test_state_tables import KEYS, OP_DELETES, TOMBSTONES, live_rows, produce_state
    from test_state_tables import upsert_drain as state_drain

    from drainer.observe.status import drain_status

    drain = state_drain(make_drain, fmt, 12_000)
    model = produce_state(drain)
    result = _drain_in_process(drain, **spark_env)
    assert live_rows(drain) == model
    assert len(model) == KEYS - OP_DELETES - TOMBSTONES
    (run,) = drain_status(drain, load_settings())["runs"]
    assert run["upsert"] == {
        "rows_inserted": len(model),
        "rows_updated": 0,
        "rows_deleted": OP_DELETES + TOMBSTONES,
        "rows_skipped_older": 0,
    }
    return result


@pytest.mark.parametrize("mode", ["dataframe", "record"])
def test_spark_connect_server_attached_to_the_cluster(
    make_drain, cluster, connect_on_cluster, mode
):
    record = {
        "mode": "record",
        "handler": "spark_jobs.examples:record_echo",
        "output_schema": RECORD_ECHO_SCHEMA,
    }
    drain = make_drain(budget=5000, **(record if mode == "record" else {}))
    _produce(drain)
    assert any("Spark Connect server" in name for name in cluster.app_names())
    remote = client_url(connect_on_cluster, load_settings().connect_token)
    result = _drain_in_process(drain, SPARK_REMOTE=remote)
    assert result["drained"] == sum(PRODUCED.values())
    assert f"Spark Connect {connect_on_cluster}" in result["spark"]
    assert f"server master {cluster.master_url}" in result["spark"]
    table = drain.sink.table
    if mode == "record":
        assert _scalar(f'SELECT count(*) FROM "{table}"') == sum(PRODUCED.values())
    else:
        assert _scalar(f'SELECT sum(records) FROM "{table}"') == sum(PRODUCED.values())


def test_a_kafka_sink_on_a_connect_server_attached_to_the_cluster_produces_from_the_driver(
    make_drain, cluster, connect_on_cluster
):
    remote = client_url(connect_on_cluster, load_settings().connect_token)
    result = _kafka_sink_from_the_driver(make_drain, SPARK_REMOTE=remote)
    assert f"server master {cluster.master_url}" in result["spark"]


def test_a_users_own_handler_module_reaches_the_clusters_executors_through_connect(
    make_drain, cluster, connect_on_cluster, tmp_path
):
    """The handler's module is in the user's folder only, on no PYTHONPATH of the server or of
    the cluster's worker: it travels with the run's Connect session (its artifacts), and the
    cluster's executors import it from there (drainer.spark.shipped_modules)."""
    folder = tmp_path / "mine"
    handler = write_user_handler(folder, "a user's module")
    drain = make_drain(
        levels=1, partitions=2, mode="record", handler=handler, output_schema=HANDLER_OUTPUT
    )
    produce_records(drain, synthetic_records(20, keys=3, seed=1), level=0)
    remote = client_url(connect_on_cluster, load_settings().connect_token)
    paths = [str(folder), os.environ.get("PYTHONPATH", "")]
    result = _drain_in_process(
        drain, SPARK_REMOTE=remote, PYTHONPATH=os.pathsep.join(p for p in paths if p)
    )
    assert result["drained"] == 20
    assert f"server master {cluster.master_url}" in result["spark"]
    table = drain.sink.table
    assert _scalar(f"SELECT count(*) FROM \"{table}\" WHERE who = 'a user''s module'") == 20


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
@pytest.mark.parametrize("case", ["routing", "state_tables"])
def test_lakehouse_cases_through_a_connect_server_on_the_cluster(
    make_drain, lakehouse, cluster, connect_on_cluster, case, fmt
):
    """Issue 49's routing case and issue 48's state-table case into Delta and Iceberg, the
    runs' driver in the Connect server attached to the cluster, their executors the cluster's."""
    remote = client_url(connect_on_cluster, load_settings().connect_token)
    drain_case = _route if case == "routing" else _state_table
    result = drain_case(make_drain, fmt, SPARK_REMOTE=remote)
    assert f"server master {cluster.master_url}" in result["spark"]
