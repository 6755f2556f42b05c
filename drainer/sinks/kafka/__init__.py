"""The Kafka topic sink, driver side: where the output goes and how the producer connects.

The whole sink lives in this package and in spark_jobs.sinks.kafka (its Spark half and the
Java writer the Spark server runs): `protocol` defines what both producers write (headers,
marker, failure kinds), `transactions` is the driver's transactional producer, which also
fences and finds a resumed run's marker, `out_batches` its produce loop, `errors` the lines a
failure becomes, `server_jar` the server's writer build. The run's output is produced in one
Kafka transaction before the Postgres commit, with a marker the transaction carries; the
Postgres transaction then only records that commit. docs/kafka-sink.md says why that is exactly
once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from drainer.config.sink_models import KafkaSinkConfig
from drainer.sinks.base import Capabilities, CommitsFirst, ServerJar, SinkCommit


class KafkaSink(CommitsFirst[KafkaSinkConfig]):
    type = "kafka"
    # Spark's Kafka jar is loaded for reading already; the commit is a Kafka transaction
    capabilities = Capabilities(
        commit="before_postgres", commit_id="marker offset", rows="records", server_code=True
    )

    @property
    def topic(self) -> str:
        return self.config.topic

    def location(self) -> str:
        return self.topic

    def uri(self) -> str:
        """`kafka://<first bootstrap server>/<topic>` (OpenLineage's naming)."""
        return f"kafka://{self.settings.bootstrap_servers.split(',')[0].strip()}/{self.topic}"

    def describe(self) -> str:
        return f"Kafka topic {self.topic}"

    def commit_line(self, commit: SinkCommit) -> str:
        """Records, topics and the marker: a Kafka transaction adds no files."""
        topics = len(commit.details.get("produced") or {})
        return (
            f"Kafka transaction committed: {commit.rows:,} records ({commit.bytes:,} bytes) "
            f"to {topics} topic{'s' if topics != 1 else ''}, its marker at offset {commit.id}"
        )

    @classmethod
    def server_jar(cls, home: Path, spark_jars: Sequence[Path]) -> ServerJar | None:
        """The Java writer that produces in the server's JVM (`server_jar`)."""
        from drainer.sinks.kafka.server_jar import server_jar

        return server_jar(home, spark_jars)
