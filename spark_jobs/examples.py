"""Example processors and handlers, as the docs, the demo and the benchmarks name them.

A processor (dataframe mode) is `transform(df) -> df` over the run's records; a handler (record
mode) is `handle(record) -> rows | None` per record, inside the Spark tasks. What only the tests
drain with lives in tests/processors.py: the package ships what its docs name.
"""

from __future__ import annotations

import random
import time
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from drainer.processing.records import Record

# output_schema of the record handlers below
RECORD_ECHO_SCHEMA = (
    "topic string, partition int, offset long, level int, key string, value_size int"
)


def time_buckets(df: DataFrame) -> DataFrame:
    """Per minute and level, how many records each key had: the "time buckets" use case."""
    return df.groupBy(
        "level",
        F.date_trunc("minute", F.col("timestamp")).alias("minute"),
        F.col("key").cast("string").alias("key"),
    ).agg(F.count(F.lit(1)).alias("records"))


def record_echo(record: Record) -> dict[str, Any]:
    """One row per record that identifies it: lets tests check 'exactly once' per record."""
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "level": record.level,
        "key": None if record.key is None else record.key.decode("utf-8", "replace"),
        "value_size": len(record.value or b""),
    }


def slow_echo(record: Record) -> dict[str, Any]:
    """A handler that waits on I/O for 0–5 ms, like a call to a downstream service."""
    time.sleep(random.uniform(0.0, 0.005))
    return record_echo(record)


def sleepy_echo(record: Record) -> dict[str, Any]:
    """`record_echo` taking a second per record: a run slow enough to interrupt (Ctrl-C) and
    resume, to see a resumed plan for yourself."""
    time.sleep(1.0)
    return record_echo(record)


SLOW_S = 10.0


def slow_one_row_per_record(df: DataFrame) -> DataFrame:
    """`one_row_per_record` after SLOW_S seconds in the run's own process: a run that holds its
    drain's lease long enough to launch another run beside it (from the CLI, Dagster or
    Airflow) and watch it wait for the lease."""
    time.sleep(SLOW_S)
    return one_row_per_record(df)


def one_row_per_record(df: DataFrame, *extra: Column) -> DataFrame:
    """One output row per record (the sink's worst case: as many rows as records); `extra`
    columns after the record's own, for a processor built on this one."""
    return df.select(
        "topic",
        "partition",
        "offset",
        "level",
        F.col("key").cast("string").alias("key"),
        F.length("value").alias("value_size"),
        *extra,
    )


def kafka_passthrough(df: DataFrame) -> DataFrame:
    """Each record to the sink topic as it is; keeps the source columns, so every output record
    names its source record in the `drainer.source` header."""
    return df.select("topic", "partition", "offset", "key", "value", "headers")
