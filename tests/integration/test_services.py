"""The local stack comes up once and stays up: repeated `up()` reuses what runs."""

from __future__ import annotations

import dataclasses
import re
import signal
from pathlib import Path

import psycopg
import pytest
import yaml
from broker_kill import kill_broker
from confluent_kafka.admin import AdminClient, NewTopic

import drainer
from drainer.config import load_drains
from drainer.kafka.producer import synthetic_records
from drainer.kafka.session import KafkaSession
from drainer.services import (
    ServiceStatus,
    connect,
    kafka,
    pyspark_version,
    spark_kafka_jars,
    status,
    up,
)
from drainer.services.kafka_config import KafkaPaths
from drainer.settings import Settings, load_settings, psycopg_url
from tests.support.drains import drain_body
from tests.support.stack import produce_records

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings()


@pytest.fixture(scope="module")
def first_up(settings: Settings) -> dict[str, ServiceStatus]:
    return {s.name: s for s in up(settings, echo=lambda _: None)}


def test_up_twice_is_idempotent(settings: Settings, first_up: dict[str, ServiceStatus]) -> None:
    second = {s.name: s for s in up(settings, echo=lambda _: None)}
    assert set(second) == {"postgres", "kafka", "spark", "connect"}
    assert all(s.running for s in second.values()) or not settings.local_spark_connect
    for name in ("postgres", "kafka", "connect"):
        assert second[name].pid == first_up[name].pid
        if first_up[name].pid is not None:  # ours, not a server somebody else runs
            assert second[name].detail.startswith("already running")
    assert [s.running for s in status(settings)][:2] == [True, True]


def test_connect_server_runs_drainer_code(settings: Settings, first_up) -> None:
    """The local Spark Connect server answers, and its Python workers import drainer (same
    virtualenv, same PYTHONPATH): what record mode's tasks need."""
    if not settings.local_spark_connect:
        pytest.skip("SPARK_REMOTE or SPARK_MASTER is set: no local Connect server")
    from spark_jobs.session import describe, get_spark, is_connect

    spark = get_spark(settings)
    assert is_connect(
        spark
    ) and f"Spark Connect sc://localhost:{load_settings().connect_port}" in describe(spark)

    def where(batches):
        import pyarrow as pa

        import drainer

        for _ in batches:
            yield pa.RecordBatch.from_pylist([{"path": drainer.__file__}])

    paths = {r.path for r in spark.range(2).mapInArrow(where, "path string").collect()}
    assert paths == {str(Path(drainer.__file__))}


def test_connect_server_keeps_its_temp_dirs_out_of_tmp(settings: Settings, first_up) -> None:
    """Spark's temp dirs (a copy of every jar per server) go to the server's own scratch, which
    the next start empties: a killed server's would otherwise fill /tmp."""
    if not settings.local_spark_connect:
        pytest.skip("SPARK_REMOTE or SPARK_MASTER is set: no local Connect server")
    scratch = connect.ConnectPaths.local(settings).scratch
    assert list(scratch.glob("spark-*/userFiles-*/spark-sql-kafka-*.jar"))
    assert list(scratch.glob("blockmgr-*"))


def test_connect_server_runs_with_drainers_kafka_pool_limits(settings: Settings, first_up) -> None:
    """The server's executors pool Kafka consumers and fetched polls with drainer's limits
    (drainer/services/kafka_pools.py), not Spark's, which kept idle consumers open long
    after their timeout."""
    if not settings.local_spark_connect:
        pytest.skip("SPARK_REMOTE or SPARK_MASTER is set: no local Connect server")
    from drainer.services.kafka_pools import KAFKA_POOLS
    from spark_jobs.session import get_spark

    spark = get_spark(settings)
    assert {key: spark.conf.get(key, None) for key in KAFKA_POOLS} == KAFKA_POOLS


def test_kafka_answers(settings: Settings, first_up: dict[str, ServiceStatus]) -> None:
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    metadata = admin.list_topics(timeout=10)
    assert metadata.brokers


def test_postgres_answers(settings: Settings, first_up: dict[str, ServiceStatus]) -> None:
    with psycopg.connect(psycopg_url(settings.database_url), connect_timeout=5) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


def test_spark_jars(settings: Settings, first_up: dict[str, ServiceStatus]) -> None:
    names = [jar.name for jar in spark_kafka_jars(settings.home)]
    version = pyspark_version()
    connector = [n for n in names if n.startswith("spark-sql-kafka-0-10_2.13-")]
    assert len(connector) == 1, names
    # exactly pyspark's version, unless Maven Central lacks it: then the newest x.y.z before it
    found = re.fullmatch(r"spark-sql-kafka-0-10_2\.13-(\d+)\.(\d+)\.(\d+)\.jar", connector[0])
    assert found, connector
    wanted = tuple(int(p) for p in version.split(".")[:3])
    got = tuple(int(p) for p in found.groups())
    assert got[:2] == wanted[:2] and got <= wanted, (connector, version)
    assert any(n.startswith("kafka-clients-") for n in names)
    # Spark ships these itself; a second copy on spark.jars would shadow or clash
    for shipped in ("scala-library-", "spark-core_", "slf4j-api-", "zstd-jni-"):
        assert not any(n.startswith(shipped) for n in names), names


def _throwaway_broker(home: Path) -> Settings:
    """Settings of a broker of its own (home, ports), not the one the suite shares."""
    base = load_settings()
    isolated = dataclasses.replace(base, bootstrap_servers="127.0.0.1:19092", home=home)
    if not isolated.local_kafka:
        pytest.skip("KAFKA_BOOTSTRAP_SERVERS is set; no local broker to restart")
    # the shared home's resolved jars: what is tested is the restart, not a second Maven run
    (home / "jars").symlink_to(base.home / "jars", target_is_directory=True)
    return isolated


def test_broker_restart_keeps_data(tmp_path) -> None:
    """stop() and up() on a throwaway broker (own home and ports), not the shared one; each
    stop is clean (SIGTERM, not the SIGKILL after 30 s) even when the process that started the
    broker ignores SIGTERM, as the suite's own process did after some module (a JVM keeps a
    shutdown signal it was started ignoring: the services start with the defaults)."""
    isolated = _throwaway_broker(tmp_path)
    ignored = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        started = kafka.up(isolated, echo=lambda _: None)
        admin = AdminClient({"bootstrap.servers": isolated.bootstrap_servers})
        admin.create_topics([NewTopic("kept", num_partitions=1)])["kept"].result(15)
        stopped = kafka.stop(isolated, echo=lambda _: None)
        assert stopped.detail == "stopped"  # not "killed"
        assert not stopped.running and not kafka.status(isolated).running
        restarted = kafka.up(isolated, echo=lambda _: None)
        assert restarted.pid != started.pid and restarted.detail == "started"
        assert "kept" in admin.list_topics(timeout=10).topics
        assert kafka.stop(isolated, echo=lambda _: None).detail == "stopped"
    finally:
        signal.signal(signal.SIGTERM, ignored)
        kafka.stop(isolated, echo=lambda _: None)


def test_a_session_reads_offsets_again_once_a_crashed_broker_is_back(tmp_path) -> None:
    """A broker killed (-9) and started again moves its partitions' leader epochs on. A run's
    Kafka session that read offsets before must read them after: librdkafka keeps the leaders
    and epochs of its metadata cache ("No leaders found", or FENCED_LEADER_EPOCH: "Leader epoch
    is older than broker epoch") until that is refreshed, which it does not do on the refusal.
    Before the fix the lookup failed here at once ("No leaders found"), and in a run whose
    cache still had the old leader, after 15 s of retries refused alike."""
    isolated = _throwaway_broker(tmp_path)
    body = drain_body("crashy", levels=1, partitions=2)
    config = tmp_path / "drains.yaml"
    config.write_text(yaml.safe_dump({"drains": {"crashy": body}}))
    drain = load_drains(config)["crashy"]
    try:
        started = kafka.up(isolated, echo=lambda _: None)
        with KafkaSession(drain, isolated) as session:
            session.create_topics()
            produce_records(drain, synthetic_records(10), partition=1, kafka=session)
            before = session.watermarks({0: [0, 1]})
            assert started.pid is not None
            scratch = KafkaPaths.under(isolated.home).scratch
            left_behind = set(scratch.iterdir())  # the codecs it unpacked, kept by a kill
            kill_broker(started.pid, isolated)
            assert kafka.up(isolated, echo=lambda _: None).detail == "started"
            assert left_behind and not left_behind & set(scratch.iterdir())
            after = session.watermarks({0: [0, 1]})  # the same session, its old metadata
        assert after == before and before[(0, 1)].high == 10
    finally:
        kafka.stop(isolated, echo=lambda _: None)
