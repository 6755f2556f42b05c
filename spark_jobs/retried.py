"""The records of a run that retries dead letters (`drainer dlq retry`), as a Kafka read's rows.

The run claimed them when it was planned (drainer.lifecycle.retries); they come from Postgres,
where the dead letters keep them byte for byte, with the columns and types of Spark's Kafka
source plus `level`, so decoding, the processor or handler and the sinks see them as they saw
the originals. A run of dead letters only: their offsets are already below the committed ones,
and its plan has no ranges to count or move.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from drainer.lifecycle.results import RunContext
from drainer.processing.headers import decode_headers
from drainer.store import retries

# Spark's Kafka source schema, then the `level` the read adds (spark_jobs.kafka_source)
KAFKA_ROW = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>, level int"
)


def retried_records(spark: SparkSession, ctx: RunContext) -> DataFrame:
    """The run's claimed dead letters, in (topic, partition, offset) order in one Spark
    partition: record mode needs each Kafka partition's records together and in order."""
    with ctx.engine.connect() as conn:
        claimed = retries.claimed_records(conn, ctx.run.id)
    rows = [
        (
            None if key is None else bytes(key),
            None if value is None else bytes(value),
            topic,
            partition,
            offset,
            ts,
            0,  # CreateTime: the dead letter keeps the timestamp, not its type
            [(name, v) for name, v in decode_headers(headers)],
            level,
        )
        for topic, partition, offset, level, key, value, headers, ts in claimed
    ]
    return spark.createDataFrame(rows, KAFKA_ROW).coalesce(1)
