"""Builds the benchmarks' Java sources (`benchmarks/jvm/`) against the jars Spark already has:
pyspark's own and the kafka-clients jar drainer downloads for Spark's Kafka source."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from common import OUT

JAVA_SOURCES = Path(__file__).resolve().parent / "jvm"


def kafka_clients_jar() -> Path:
    from drainer.settings import load_settings
    from drainer.spark.jars import spark_kafka_jars

    return next(p for p in spark_kafka_jars(load_settings().home) if "kafka-clients" in p.name)


def jvm_producer_settings() -> dict[str, str]:
    """drainer's Kafka sink producer settings as the JVM's KafkaProducer takes them: the
    defaults the sink's server-side producer starts from."""
    from spark_jobs.sinks.kafka_server import server_defaults

    return server_defaults()


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def build(name: str, classpath: list[Path]) -> Path:
    """`benchmarks/jvm/<name>.java` compiled into `benchmarks/out/jvm/<name>.jar`."""
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        sys.exit(f"{name} needs a JDK: javac and jar on PATH")
    classes = OUT / "jvm" / name
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    cp = ":".join(str(p) for p in classpath)
    subprocess.run(
        [javac, "-nowarn", "-d", str(classes), "-cp", cp, str(JAVA_SOURCES / f"{name}.java")],
        check=True,
    )
    built = OUT / "jvm" / f"{name}.jar"
    subprocess.run([jar, "cf", str(built), "-C", str(classes), "."], check=True)
    return built
