"""The Kafka sink's producer for the Spark server (spark_jobs/sinks/kafka/KafkaTxnSink.java).

`drainer services up` asks every sink for the code it runs in the server's JVM
(`Sink.server_jar`); this sink's is compiled with the JDK's `javac` against pyspark's own jars
and Spark's kafka-clients, into `home/jars/`, and the local Connect server starts with both on
its own class path: the sink then produces in the server's JVM, where the same transaction costs
a sixth of the CPU it costs the driver (benchmarks/producer_floor.py). Without a JDK (or the
source) there is no jar, and the sink produces from the driver, as on a `SPARK_REMOTE` server
or a standalone cluster.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from drainer.errors import ServiceError
from drainer.sinks.base import ServerJar
from drainer.spark.javac import compile_jar, has_jdk, pyspark_jars
from drainer.spark.lock import file_lock

SINK_CLASS = "drainer.KafkaTxnSink"
# set on a server started with the jar on its class path (its file name): what a run asks
SERVER_CONF = "spark.drainer.kafkaSink"
NO_JDK = (
    "no JDK (javac) on PATH: Kafka sinks will produce from the driver, ~1.7x slower for large "
    "outputs; install a JDK 17+ and run `drainer services up` again"
)


def source() -> Path | None:
    """The Java writer's source, shipped beside the sink's Spark half (package data)."""
    spec = importlib.util.find_spec("spark_jobs")  # found, not imported: it imports pyspark
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    path = root / "sinks" / "kafka" / "KafkaTxnSink.java"
    return path if path.is_file() else None


def kafka_clients_jar(spark_jars: Sequence[Path]) -> Path:
    """The kafka-clients jar among the jars Spark's Kafka source runs on."""
    return next(p for p in spark_jars if p.name.startswith("kafka-clients"))


def server_jar(home: Path, spark_jars: Sequence[Path]) -> ServerJar | None:
    """The sink's jar (built once per source and Spark jars) and the kafka-clients jar it runs
    on; None without the source. ServiceError without a JDK, or with javac's words."""
    java = source()
    if java is None:
        return None
    if not has_jdk():
        raise ServiceError(NO_JDK)
    kafka_clients = kafka_clients_jar(spark_jars)
    own = sorted(pyspark_jars().glob("*.jar"))
    digest = hashlib.sha256(
        java.read_bytes() + " ".join(p.name for p in [*own, kafka_clients]).encode()
    ).hexdigest()[:12]
    built = home / "jars" / f"drainer-kafka-sink-{digest}.jar"
    with file_lock(home / "jars" / ".drainer-kafka-sink.lock"):
        if not built.exists():
            try:
                compile_jar(java, [*own, kafka_clients], built)
            except ServiceError as err:
                raise ServiceError(f"{err}: Kafka sinks will produce from the driver") from None
    return ServerJar((built, kafka_clients), {SERVER_CONF: built.name}, built.name)
