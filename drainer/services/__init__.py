"""The local development stack: PostgreSQL, a KRaft Kafka broker, Spark's Kafka jars and a
Spark Connect server.

`up()` is idempotent and cheap when everything already runs, so the CLI, tests and notebooks can
call it freely. Services given by environment variables (DRAINER_DATABASE_URL,
KAFKA_BOOTSTRAP_SERVERS, SPARK_REMOTE) are only checked, never started; with SPARK_MASTER set
runs use an in-process session and no Connect server is started. Imports neither pyspark nor dagster.
"""

from __future__ import annotations

from collections.abc import Callable

from drainer.errors import ServiceError
from drainer.services import connect, kafka, postgres
from drainer.services.status import ServiceStatus
from drainer.settings import Settings
from drainer.spark.jars import kafka_broker_jars, pyspark_version, spark_kafka_jars
from drainer.spark.lock import file_lock

__all__ = [
    "ServiceError",
    "ServiceStatus",
    "down",
    "kafka_broker_jars",
    "pyspark_version",
    "spark_kafka_jars",
    "status",
    "up",
]

Echo = Callable[[str], None]


def up(
    settings: Settings,
    echo: Echo = print,
    formats: tuple[str, ...] | None = None,
    restart: bool = False,
    wait_s: float = 0.0,
) -> list[ServiceStatus]:
    """Bring up Postgres, Kafka and the Spark Connect server (or check the configured ones).

    `formats`: the table formats whose jars the Connect server loads; default: those the drains
    file uses (connect.up). A Connect server that must restart while runs use it: waited for
    `wait_s`, then refused, unless `restart` (connect.start).
    """
    results = []
    with file_lock(settings.home / "services.lock"):
        for service in (postgres, kafka):
            result = service.up(settings, echo)
            echo(result.line())
            results.append(result)
    jars = spark_kafka_jars(settings.home)
    connector = next((j.name for j in jars if j.name.startswith("spark-sql-kafka")), "?")
    detail = f"{len(jars)} jars for spark.jars ({connector}"
    if f"-{pyspark_version()}.jar" not in connector:
        detail += f"; Maven Central has no connector for pyspark {pyspark_version()}"
    result = ServiceStatus("spark", True, str(jars[0].parent), None, detail + ")")
    echo(f"{'spark':<9} jars ready in {result.address}: {result.detail}")
    results.append(result)
    with file_lock(settings.home / "services.lock"):
        result = connect.up(settings, echo, formats, restart=restart, wait_s=wait_s)
    echo(result.line())
    results.append(result)
    return results


def down(settings: Settings, echo: Echo = print) -> list[ServiceStatus]:
    """Stop the services we started (Spark, then Kafka: those with clients first); keep data."""
    results = []
    with file_lock(settings.home / "services.lock"):
        for service in (connect, kafka, postgres):
            result = service.stop(settings, echo)
            echo(result.line())
            results.append(result)
    return results


def status(settings: Settings) -> list[ServiceStatus]:
    """The state of Postgres, Kafka and Spark Connect, without starting or stopping anything."""
    return [postgres.status(settings), kafka.status(settings), connect.status(settings)]
