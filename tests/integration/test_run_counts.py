"""Where a run counts what it read (spark_jobs.run_counts): above a processor that keeps one row
per record (free), beneath any other (a copy of each record), and the counts exact either way.

The plans are built on the stack's Spark Connect session; `preserves_rows` reads them on the
client, so those cases ask the server nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from sqlalchemy import text

from drainer.kafka.producer import synthetic_records
from drainer.settings import load_settings
from spark_jobs import drain_job, run_counts
from spark_jobs.examples import kafka_passthrough, one_row_per_record
from spark_jobs.row_preserving import preserves_rows
from spark_jobs.session import is_connect
from tests.support.stack import get_engine, produce_records

Step = Callable[[DataFrame], DataFrame]

KEEP: dict[str, Step] = {
    "select": lambda df: df.select("offset", "topic", F.col("value").alias("v")),
    "one_row_per_record": lambda df: one_row_per_record(df.withColumn("level", F.lit(0))),
    "kafka_passthrough": kafka_passthrough,
    "withColumn": lambda df: df.withColumn(
        "x", F.when(F.col("offset") > 3, F.upper("topic")).otherwise(F.lit("a"))
    ),
    "cast_and_json": lambda df: df.withColumn(
        "j", F.from_json(F.col("value").cast("string"), "a int")
    ),
    "drop": lambda df: df.drop("timestamp"),
    "rename": lambda df: df.withColumnsRenamed({"key": "k"}).withColumnsRenamed({"k": "key"}),
    "alias": lambda df: df.alias("records").select("*"),
    "identity": lambda df: df,
}
CHANGE: dict[str, Step] = {
    "where": lambda df: df.where(F.col("offset") > 1),
    "count": lambda df: df.select(F.count("*").alias("offset"), *df.columns[1:]),
    "explode": lambda df: df.withColumn("offset", F.explode(F.array("offset", "offset"))),
    "window": lambda df: df.withColumn("n", F.row_number().over(Window.orderBy("offset"))),
    "sql_text": lambda df: df.selectExpr("*", "offset + 1 AS next"),
    "python_udf": lambda df: df.withColumn("o", F.udf(lambda x: x, "long")("offset")),
    "distinct": lambda df: df.distinct(),
    "limit": lambda df: df.limit(5),
    "union": lambda df: df.unionByName(df),
}


@pytest.fixture
def records(spark) -> DataFrame:
    """Rows shaped as drainer's read (no server asked: a plan built on the client)."""
    if not is_connect(spark):
        pytest.skip("preserves_rows reads Spark Connect plans; a classic session counts beneath")
    return spark.range(10).select(
        F.col("id").alias("offset"),
        F.lit("t-0").alias("topic"),
        F.lit(0).alias("partition"),
        F.lit(b"k").alias("key"),
        F.lit(b"{}").alias("value"),
        F.current_timestamp().alias("timestamp"),
    )


@pytest.mark.parametrize("step", sorted(KEEP))
def test_a_projection_keeps_one_row_per_record(records, step):
    assert preserves_rows(KEEP[step](records), records)


@pytest.mark.parametrize("step", sorted(CHANGE))
def test_anything_else_is_not_proven_to_keep_rows(records, step):
    assert not preserves_rows(CHANGE[step](records), records)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keep=st.lists(st.sampled_from(sorted(KEEP)), max_size=5),
    change=st.one_of(st.none(), st.tuples(st.sampled_from(sorted(CHANGE)), st.integers(0, 5))),
)
def test_a_chain_keeps_rows_exactly_when_every_step_does(records, keep, change):
    steps = [KEEP[name] for name in keep]
    if change is not None:
        name, at = change
        steps.insert(min(at, len(steps)), CHANGE[name])
    out = records
    for step in steps:
        out = step(out)
    assert preserves_rows(out, records) == (change is None)


def _read_counts(drain) -> list[tuple[int, int, int | None]]:
    with get_engine().connect() as conn:
        return [
            tuple(row)
            for row in conn.execute(
                text(
                    "SELECT rr.partition, rr.read_records, rr.read_bytes FROM run_ranges rr"
                    " JOIN runs r ON r.id = rr.run_id WHERE r.drain = :d ORDER BY rr.partition"
                ),
                {"d": drain.name},
            )
        ]


@pytest.mark.parametrize(
    ("processor", "measure_bytes", "beneath"),
    [
        ("spark_jobs.examples:one_row_per_record", None, False),  # counted on its output
        ("spark_jobs.examples:one_row_per_record", True, True),  # bytes are on the read only
        ("tests.processors:no_rows", None, True),  # a filter: its output is not the records
    ],
)
def test_a_run_counts_its_read_exactly_wherever_it_counts_it(
    make_drain, spark, monkeypatch, processor, measure_bytes, beneath
):
    """Each partition's records are exact from either place; bytes only where measured; the
    read is counted beneath the processor only when its output cannot stand for it."""
    drain = make_drain(
        levels=1, partitions=2, processor=processor, measure_bytes=measure_bytes, budget=10_000
    )
    produce_records(drain, synthetic_records(300, keys=7, seed=5, value_size=90), level=0)
    real, calls = run_counts.counted, []

    def counted(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(run_counts, "counted", counted)
    result = drain_job.run(drain, settings=load_settings())
    assert result.drained == 300
    assert bool(calls) == beneath
    read = _read_counts(drain)
    assert sum(n for _, n, _ in read) == 300 and len(read) == 2
    if measure_bytes:
        assert all(b is not None and b > n * 90 for _, n, b in read)
    else:
        assert all(b is None for _, _, b in read)
