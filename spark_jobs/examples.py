"""Example processors and handlers: the demo's, the benchmarks' and the tests'.

A processor (dataframe mode) is `transform(df) -> df` over the run's records; a handler (record
mode) is `handle(record) -> rows | None` per record, inside the Spark tasks.
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


def _echo(record: Record) -> dict[str, Any]:
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "level": record.level,
        "key": None if record.key is None else record.key.decode("utf-8", "replace"),
        "value_size": len(record.value or b""),
    }


def record_echo(record: Record) -> dict[str, Any]:
    """One row per record that identifies it: lets tests check 'exactly once' per record."""
    return _echo(record)


def slow_echo(record: Record) -> dict[str, Any]:
    """A handler that waits on I/O for 0–5 ms, like a call to a downstream service."""
    time.sleep(random.uniform(0.0, 0.005))
    return _echo(record)


def sleepy_echo(record: Record) -> dict[str, Any]:
    """A handler that takes a second per record: a run slow enough to interrupt mid-job."""
    time.sleep(1.0)
    return _echo(record)


def poison_echo(record: Record) -> dict[str, Any]:
    """Fails on every record whose value contains b'poison': a record that can never succeed."""
    if record.value is not None and b"poison" in record.value:
        raise ValueError(f"poison record at {record.topic}[{record.partition}]@{record.offset}")
    return _echo(record)


def one_row_per_record(df: DataFrame) -> DataFrame:
    """One output row per record (the sink's worst case: as many rows as records)."""
    return _per_record(df)


SLOW_S = 10.0


def slow_one_row_per_record(df: DataFrame) -> DataFrame:
    """`one_row_per_record` after SLOW_S seconds in the run's own process: a run that is
    mid-way (its plan stored, nothing written) and holds its drain's lease long enough for a
    test to act on it (kill its process; launch another run of the drain beside it)."""
    time.sleep(SLOW_S)
    return _per_record(df)


def with_read_task(df: DataFrame) -> DataFrame:
    """`one_row_per_record` plus the Spark task that read the record (tests count the tasks)."""
    return _per_record(df, F.spark_partition_id().alias("read_task"))


def _per_record(df: DataFrame, *extra: Column) -> DataFrame:
    return df.select(
        "topic",
        "partition",
        "offset",
        "level",
        F.col("key").cast("string").alias("key"),
        F.length("value").alias("value_size"),
        *extra,
    )


def no_rows(df: DataFrame) -> DataFrame:
    """The shape of `one_row_per_record`, but no row at all (a filter that matched nothing).

    The filter is on the data, not a constant (for that, see `nothing_kept`).
    """
    return one_row_per_record(df).where(F.col("offset") < 0)


def nothing_kept(df: DataFrame) -> DataFrame:
    """No row by construction: Spark prunes the whole plan, the read's observation with it, so
    the run counts its records with a second read (spark_jobs.kafka_source.counted)."""
    return one_row_per_record(df).where(F.lit(False))


def always_fails(df: DataFrame) -> DataFrame:
    """A processor with a bug that fails every attempt: a plan that can never succeed."""
    raise RuntimeError("always_fails: this processor has a bug")


def leaks_the_database_url(df: DataFrame) -> DataFrame:
    """A processor whose error echoes drainer's database URL, password and all (as a driver's
    connection error may): the redaction tests' known secret, raised wherever the run runs."""
    from drainer.settings import load_settings

    raise RuntimeError(f"could not connect to {load_settings().database_url}")


def _parse_amount(value):  # type: ignore[no-untyped-def]  # hints would make it a pandas UDF
    raise ValueError(f"no amount in {bytes(value[:8])!r}")


def failing_udf(df: DataFrame) -> DataFrame:
    """A processor whose UDF raises in the Spark tasks: the error comes back through Spark."""
    parse = F.udf(_parse_amount, "string")
    return df.select(parse(F.col("value")).alias("amount"))


def one_row_with_value(df: DataFrame) -> DataFrame:
    """`one_row_per_record` plus the value as text: a new output column (schema evolution)."""
    return _per_record(df, F.col("value").cast("string").alias("value_text"))


def new_column_then_fails(df: DataFrame) -> DataFrame:
    """`one_row_with_value` whose tasks fail: a write that adds a column and never commits."""
    parse = F.udf(_parse_amount, "string")
    return one_row_with_value(df.where(parse(F.col("value")).isNull()))


def value_size_as_text(df: DataFrame) -> DataFrame:
    """`one_row_per_record` with `value_size` as a string: an incompatible type change."""
    return one_row_per_record(df).withColumn("value_size", F.col("value_size").cast("string"))


AMOUNT_SCHEMA = "id string, amount double"


def amount_or_lots(record: Record) -> dict[str, Any]:
    """A handler whose row for the value `lots` puts text in the double column `amount`."""
    value = (record.value or b"").decode()
    return {"id": value, "amount": "lots" if value == "lots" else 1.0}


def amount_and_a_note(record: Record) -> dict[str, Any]:
    """A handler whose rows carry a key that is not a column of AMOUNT_SCHEMA."""
    return {"id": (record.value or b"").decode(), "amount": 1.0, "note": "dropped?"}


# Kafka sink examples: output rows in Spark's Kafka sink schema (`value`, `key`, `headers`, …)
KAFKA_ROW_SCHEMA = "key binary, value binary"


def kafka_passthrough(df: DataFrame) -> DataFrame:
    """Each record to the sink topic as it is; keeps the source columns, so every output record
    names its source record in the `drainer.source` header."""
    return df.select("topic", "partition", "offset", "key", "value", "headers")


def kafka_routed(df: DataFrame) -> DataFrame:
    """Fan-out as in Spark's Kafka sink: a record with a `route` header goes to partition 0 of
    the topic that header names, the others to the sink's topic. The source columns are left
    out, so `topic` and `partition` route the row (and no `drainer.source` header is added)."""
    route = F.element_at(F.filter("headers", lambda h: h["key"] == "route"), 1)["value"]
    return df.select(
        "value",
        "headers",
        route.cast("string").alias("topic"),
        F.when(route.isNotNull(), F.lit(0)).alias("partition"),
    )


def kafka_echo(record: Record) -> dict[str, Any]:
    """Record mode: the record's key and value, produced to the sink topic."""
    return {"key": record.key, "value": record.value}


def kafka_poison_echo(record: Record) -> dict[str, Any]:
    """`kafka_echo`, but fails on every record whose value contains b'poison' (`poison_echo`)."""
    poison_echo(record)
    return kafka_echo(record)


def kafka_one_without_value(df: DataFrame) -> DataFrame:
    """`kafka_passthrough`, but the record at offset 3 has no value (a null: not producible)."""
    return kafka_passthrough(df).withColumn("value", F.when(F.col("offset") != 3, F.col("value")))


def kafka_one_oversized(df: DataFrame) -> DataFrame:
    """`kafka_passthrough`, but the record at offset 3 becomes a value over 1 MB (too large)."""
    big = F.repeat(F.lit("x"), 1_100_000).cast("binary")
    return kafka_passthrough(df).withColumn(
        "value", F.when(F.col("offset") == 3, big).otherwise(F.col("value"))
    )
