"""Processors and handlers that only the tests drain with: failures, poison records, output
that a sink must refuse. The documented examples stay in `spark_jobs.examples`.

A drain names them `tests.processors:<name>`. Spark's Python workers import them by module, so
the repository's root is on the PYTHONPATH of every process a test starts, the stack's Spark
Connect server among them (tests/conftest.py).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from drainer.processing.records import Record
from spark_jobs.examples import kafka_passthrough, one_row_per_record, record_echo


def poison_echo(record: Record) -> dict[str, Any]:
    """Fails on every record whose value contains b'poison': a record that can never succeed."""
    if record.value is not None and b"poison" in record.value:
        raise ValueError(f"poison record at {record.topic}[{record.partition}]@{record.offset}")
    return record_echo(record)


def with_read_task(df: DataFrame) -> DataFrame:
    """`one_row_per_record` plus the Spark task that read the record (tests count the tasks)."""
    return one_row_per_record(df, F.spark_partition_id().alias("read_task"))


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
    return one_row_per_record(df, F.col("value").cast("string").alias("value_text"))


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


# where `keys_seen` notes each row it sees (set in the process that builds the plan)
ROWS_SEEN_FILE = "DRAINER_TEST_ROWS_SEEN"


def _seen(path, key):  # type: ignore[no-untyped-def]  # hints would make it a pandas UDF
    with open(path, "a") as notes:
        notes.write("x\n")  # one short line per evaluation: appends of it do not interleave
    return key


def keys_seen(df: DataFrame) -> DataFrame:
    """The decoded rows unchanged, each `_key` passed through a UDF that notes one line per
    row it computes: how many times the run's records were read and processed. Nondeterministic,
    so Spark neither computes it once for two reads nor prunes it from a read that needs the key."""
    import os

    seen = F.udf(_seen, "string").asNondeterministic()
    return df.withColumn("_key", seen(F.lit(os.environ[ROWS_SEEN_FILE]), F.col("_key")))


def values_seen(df: DataFrame) -> DataFrame:
    """A Kafka read with each `value` passed through `_seen`: how many times a run read (and
    decoded) its records, whatever it does with them after."""
    import os

    seen = F.udf(_seen, "binary").asNondeterministic()
    return df.withColumn("value", seen(F.lit(os.environ[ROWS_SEEN_FILE]), F.col("value")))


def kind_by_level(df: DataFrame) -> DataFrame:
    """A route column a processor makes (issue 49): `level<n>`, but no name for level 1."""
    level = F.col("_level")
    kind = F.when(level == 1, F.lit("not a name")).otherwise(
        F.concat(F.lit("level"), level.cast("string"))
    )
    return df.select("_topic", "_partition", "_offset", kind.alias("kind"))


def kafka_versions(df: DataFrame) -> DataFrame:
    """`kafka_passthrough` plus `v`, the version a JSON value `{"id", "v"}` carries (null for a
    tombstone): the Kafka sink's upsert tests order by it."""
    v = F.get_json_object(F.col("value").cast("string"), "$.v").cast("int")
    return kafka_passthrough(df).withColumn("v", v)
