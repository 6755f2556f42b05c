"""Builds the benchmarks' Java sources (`benchmarks/jvm/`) against the jars Spark already has:
pyspark's own and the kafka-clients jar drainer downloads for Spark's Kafka source."""

from __future__ import annotations

import sys
from pathlib import Path

from common import OUT

JAVA_SOURCES = Path(__file__).resolve().parent / "jvm"


def kafka_clients_jar() -> Path:
    from drainer.settings import load_settings
    from drainer.sinks.kafka.server_jar import kafka_clients_jar as find
    from drainer.spark.jars import spark_kafka_jars

    return find(spark_kafka_jars(load_settings().home))


def jvm_producer_settings() -> dict[str, str]:
    """drainer's Kafka sink producer settings as the JVM's KafkaProducer takes them: the
    defaults the sink's server-side producer starts from."""
    import fair

    return fair.drainer_java_producer_settings()


def pyspark_jars() -> Path:
    from drainer.spark.javac import pyspark_jars as jars

    return jars()


def build(name: str, classpath: list[Path]) -> Path:
    """`benchmarks/jvm/<name>.java` compiled into `benchmarks/out/jvm/<name>.jar`."""
    from drainer.spark.javac import compile_jar, has_jdk

    if not has_jdk():
        sys.exit(f"{name} needs a JDK: javac and jar on PATH")
    built = OUT / "jvm" / f"{name}.jar"
    compile_jar(JAVA_SOURCES / f"{name}.java", classpath, built)
    return built
