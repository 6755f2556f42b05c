"""The Spark half of each sink, keyed like drainer.sinks' registry: `spark_sink_for(...)`.

Each class extends its format's driver-side sink (drainer.sinks) with the steps Spark runs:
write the output, find a run's commit, compact the table (spark_jobs.sinks.base says what).
"""

from __future__ import annotations

from typing import Any

from drainer.settings import Settings
from drainer.sinks import SINKS
from drainer.sinks.routed import router
from spark_jobs.sinks.base import SparkSink
from spark_jobs.sinks.delta import DeltaSparkSink
from spark_jobs.sinks.iceberg import IcebergSparkSink
from spark_jobs.sinks.kafka import KafkaSparkSink
from spark_jobs.sinks.postgres import PostgresSparkSink
from spark_jobs.sinks.routed import routed_spark_class

SPARK_SINKS: dict[str, type[SparkSink]] = {
    cls.type: cls for cls in (PostgresSparkSink, DeltaSparkSink, IcebergSparkSink, KafkaSparkSink)
}
assert set(SPARK_SINKS) == set(SINKS), "every sink has its Spark half"


def spark_sink_for(config: Any, settings: Settings, drain: str = "") -> SparkSink:
    """The Spark side of the sink a drain's `sink:` block configures (`drain`: its name, for a
    routed sink's tables)."""
    single = SPARK_SINKS[config.type]
    if router(config) is not None:
        return routed_spark_class(single)(config, settings, drain)
    return single(config, settings)


__all__ = ["SPARK_SINKS", "SparkSink", "spark_sink_for"]
