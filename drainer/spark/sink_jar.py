"""The Kafka sink's producer for the Spark server (`spark_jobs/jvm/drainer/KafkaTxnSink.java`).

`drainer services up` compiles it with the JDK's `javac` against pyspark's own jars and Spark's
kafka-clients, into `home/jars/`, and starts the local Connect server with both on its own class
path: the sink then produces in the server's JVM, where the same transaction costs a sixth of
the CPU it costs the driver (benchmarks/README.md, issue 27's twelfth part). Without a JDK (or
the source) there is no jar, and the sink produces from the driver, as on a `SPARK_REMOTE`
server or a standalone cluster.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from drainer.errors import ServiceError
from drainer.spark.jars import pyspark_version, spark_kafka_jars
from drainer.spark.lock import file_lock

log = logging.getLogger(__name__)

SINK_CLASS = "drainer.KafkaTxnSink"
# set on a server started with the jar on its class path (its file name): what a run asks
SERVER_CONF = "spark.drainer.kafkaSink"
NO_JDK = (
    "no JDK (javac) on PATH: Kafka sinks will produce from the driver, ~1.7x slower for large "
    "outputs; install a JDK 17+ and run `drainer services up` again"
)


def _source() -> Path | None:
    spec = importlib.util.find_spec("spark_jobs")  # found, not imported: it imports pyspark
    if spec is None or not spec.submodule_search_locations:
        return None
    path = (
        Path(next(iter(spec.submodule_search_locations))) / "jvm" / "drainer" / "KafkaTxnSink.java"
    )
    return path if path.is_file() else None


def pyspark_jars() -> Path:
    """The installed pyspark's own jars (its `jars/` folder), found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def has_jdk() -> bool:
    return shutil.which("javac") is not None and shutil.which("jar") is not None


def server_sink_classpath(home: Path) -> list[Path] | None:
    """The sink's jar (built once per source and pyspark version) and the kafka-clients jar it
    runs on, for the server's `spark.driver.extraClassPath`; None without a JDK or the source.
    A build that fails raises ServiceError with javac's words."""
    source = _source()
    if source is None or not has_jdk():
        return None
    kafka_clients = kafka_clients_jar(home)
    digest = hashlib.sha256(
        source.read_bytes() + f"{pyspark_version()} {kafka_clients.name}".encode()
    ).hexdigest()[:12]
    built = home / "jars" / f"drainer-kafka-sink-{digest}.jar"
    with file_lock(home / "jars" / ".drainer-kafka-sink.lock"):
        if not built.exists():
            compile_jar(source, [*pyspark_jars().glob("*.jar"), kafka_clients], built)
    return [built, kafka_clients]


def kafka_clients_jar(home: Path) -> Path:
    """The kafka-clients jar Spark's Kafka source runs on (drainer resolves it into `home`)."""
    return next(p for p in spark_kafka_jars(home) if p.name.startswith("kafka-clients"))


def compile_jar(source: Path, classpath: list[Path], built: Path) -> None:
    """`source` compiled with the JDK's javac against `classpath` into the jar `built`;
    ServiceError with javac's words if it fails (a JDK on PATH: `has_jdk`)."""
    javac, jar_tool = shutil.which("javac") or "javac", shutil.which("jar") or "jar"
    with tempfile.TemporaryDirectory(prefix="drainer-sink-") as tmp:
        classes = Path(tmp) / "classes"
        steps = [
            [
                javac,
                "-nowarn",
                "-d",
                str(classes),
                "-cp",
                ":".join(map(str, classpath)),
                str(source),
            ],
            [jar_tool, "cf", str(Path(tmp) / built.name), "-C", str(classes), "."],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                raise ServiceError(
                    f"building the Kafka sink's server jar failed ({Path(step[0]).name}): "
                    f"{(done.stderr or done.stdout).strip()[-2000:]}"
                )
        built.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(Path(tmp) / built.name), built)
    log.info("built the Kafka sink's server jar %s", built)
