"""Read exactly a plan's offset ranges from Kafka as a DataFrame (bounded, batch)."""

from __future__ import annotations

import json
from collections import defaultdict

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from drainer.config import DrainConfig
from drainer.kafka_security import java_settings
from drainer.offset_map import decode_offset_map
from drainer.store.runs import StoredRange


def read_ranges(
    spark: SparkSession, drain: DrainConfig, bootstrap: str, ranges: list[StoredRange]
) -> DataFrame:
    """`assign` plus numeric starting and ending offsets: Spark reads [start, end) and no more.

    Offsets already done (the offset map) are dropped, so no completed record is redone. The
    `level` column comes from the topic's suffix.
    """
    assign: dict[str, list[int]] = defaultdict(list)
    starting: dict[str, dict[str, int]] = defaultdict(dict)
    ending: dict[str, dict[str, int]] = defaultdict(dict)
    for rng in ranges:
        assign[rng.topic].append(rng.partition)
        starting[rng.topic][str(rng.partition)] = rng.start
        ending[rng.topic][str(rng.partition)] = rng.end
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        # records deleted by retention inside a planned range must stop the run, not vanish
        .option("failOnDataLoss", "true")
    )
    # the common `kafka:` block translated for the Java client, plus its `kafka_java:` extras;
    # the session redacts secret option values from plan text (spark_jobs.session)
    for key, value in java_settings(drain).items():
        reader = reader.option(f"kafka.{key}", value)
    df = reader.load().withColumn(
        "level", F.element_at(F.split(F.col("topic"), "-"), -1).cast("int")
    )
    done = [
        (rng.topic, rng.partition, offset)
        for rng in ranges
        for offset in sorted(decode_offset_map(rng.start, rng.start_map))
        if offset < rng.end
    ]
    if done:
        skip = spark.createDataFrame(done, "topic string, partition int, offset long")
        df = df.join(F.broadcast(skip), ["topic", "partition", "offset"], "left_anti")
    return df
