"""The Kafka topic sink, driver side: where the output goes and how the producer connects.

The run's output is produced by the driver in one Kafka transaction before the Postgres
commit, with a marker the transaction carries (drainer.kafka.transactions); the Postgres
transaction then only records that commit. docs/kafka-sink.md says why that is exactly once.
"""

from __future__ import annotations

from drainer.config.sinks import KafkaSinkConfig
from drainer.sinks.base import Capabilities, TableSink


class KafkaSink(TableSink[KafkaSinkConfig]):
    type = "kafka"
    # Spark's Kafka jar is loaded for reading already; the commit is a Kafka transaction
    capabilities = Capabilities(commit="before_postgres", commit_id="transaction")

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
