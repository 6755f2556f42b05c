"""Iceberg upserts: one MERGE per run, published once by write-audit-publish.

With `write.wap.enabled` on the table and the session setting `spark.wap.id` (set on a session
of the merge's own, `own_settings`, never on the session runs share), the MERGE's snapshot is
staged off `main` with the run's WAP id; the cherry-pick publishes it, and the run's commit is
found by that id as an append's is (spark_jobs.sinks.iceberg). A staged snapshot whose parent
is `main`'s head is published by fast-forward, where Iceberg does not look for the WAP id on
`main` itself: a resumed run looks first, right before (a first attempt has nothing to find:
its nonce is new), and a merge applied twice would change no row anyway (the same versions are
not newer than themselves).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from drainer.errors import ConfigError, ServiceError
from drainer.lifecycle.results import RunContext
from drainer.sinks import SinkCommit
from drainer.sinks.upsert import KEY_PROPERTY, UpsertSpec, check_key_unchanged
from drainer.store.upserts import iceberg_state_table
from spark_jobs.own_session import own_settings
from spark_jobs.sinks.base import fit_schema, note_columns_added, run_of
from spark_jobs.sinks.iceberg import WAP_ID, IcebergSparkSink, wap_id
from spark_jobs.sinks.upsert import (
    added_columns,
    bq,
    collapse,
    counts_details,
    merge_sql,
    read_once,
    recorded_key,
    refill,
)

# Iceberg's metadata column of the same name: a table with a data column `_partition` takes no
# MERGE, so an Iceberg state table stores the record's Kafka partition as `_kafka_partition`
RESERVED = "_partition"
KAFKA_PARTITION = "_kafka_partition"


def _renamed(column: str) -> str:
    return KAFKA_PARTITION if column == RESERVED else column


def merge_iceberg(
    sink: IcebergSparkSink, spark: SparkSession, ctx: RunContext, out: DataFrame, spec: UpsertSpec
) -> SinkCommit:
    table = sink.location()
    drain, run_id, nonce, attempt = run_of(ctx)
    read_spec = spec  # of the output's columns; `spec` is of the table's
    collapsed = collapse(out, spec, table, fill=False)  # `read_once` fills tombstones' order
    renamed = RESERVED in collapsed.columns
    if renamed:  # Iceberg refuses row-level changes to such a table
        spec = replace(
            spec,
            keys=tuple(_renamed(c) for c in spec.keys),
            order=tuple(_renamed(c) for c in spec.order),
        )

    def as_stored(rows: DataFrame) -> DataFrame:
        return rows.withColumnRenamed(RESERVED, KAFKA_PARTITION) if renamed else rows

    source = as_stored(collapsed)
    existing = sink._schema(spark)
    if existing is None:
        _create(spark, table, source, spec)
        existing = spark.table(table).schema
    else:
        check_key_unchanged(table, recorded_key(spark, table), spec)
        _check_no_reserved_column(table, existing.fieldNames())
    note_columns_added(ctx, [n for n in source.columns if n not in existing.fieldNames()])
    if added_columns(spark, table, source, existing):
        existing = spark.table(table).schema
    fitted = existing

    def shape(rows: DataFrame) -> DataFrame:
        return fit_schema(as_stored(rows), fitted, table)

    # only an earlier attempt of the run can have published its merge: a first attempt's
    # nonce is new (spark_jobs.drain_job looks for a resumed run's commit the same way)
    earlier = attempt > 1
    found = sink._commit_of(spark, drain, run_id, nonce) if earlier else None
    if found is not None:  # an earlier attempt published the run's merge
        return found
    again = refill(out, read_spec, table, shape)
    # Kafka read once; twice in a run with tombstones that take their order from the row
    # before them (`read_once`)
    with read_once(shape(collapsed), spec, spark.table(table), again) as (source, view, counts):
        wap = wap_id(drain, run_id, nonce)
        # a clone, released afterwards, not a kept session (`keep_for`): only a released
        # session frees the checkpoint below (dropping the DataFrame left its blocks on the server)
        with own_settings(spark) as merging:
            merging.conf.set("spark.wap.id", wap)
            # Iceberg's row-level MERGE takes a deterministic source only (the Kafka read and the
            # decoding's partition barrier are not): the collapsed rows, checkpointed from the cache
            fixed = merging.table(view).localCheckpoint()
            merging.sql(merge_sql(table, spec, source.columns), src=fixed).collect()
    staged = (
        spark.table(f"{table}.snapshots")
        .where(F.col("summary")[WAP_ID] == wap)
        .orderBy(F.col("committed_at").desc())
        .select("snapshot_id")
        .limit(1)
        .collect()
    )
    done = sink._commit_of(spark, drain, run_id, nonce) if earlier else None
    if done is None and staged:
        try:
            spark.sql(
                f"CALL {sink.catalog}.system.cherrypick_snapshot(table => '{sink.table}', "
                f"snapshot_id => {staged[0]['snapshot_id']})"
            ).collect()
        except Exception:
            if sink._commit_of(spark, drain, run_id, nonce) is None:
                raise
            return sink._commit_of(spark, drain, run_id, nonce) or _lost(table, run_id)
        done = sink._commit_of(spark, drain, run_id, nonce)
        if done is not None:
            return replace(done, attempt=attempt, details=counts_details(counts))
    return done or _lost(table, run_id)


def _check_no_reserved_column(table: str, columns: Sequence[str]) -> None:
    """A table with a data column named as Iceberg's metadata column takes no MERGE (Iceberg
    refuses it with a Java stack trace deep in the write): a one-line error before any work."""
    if RESERVED in columns:
        raise ConfigError(
            f"sink.write is upsert, but the Iceberg table {table} has a column {RESERVED}, the "
            "name of Iceberg's metadata column, and Iceberg takes no MERGE into such a table "
            f"(drainer's state tables keep the Kafka partition as {KAFKA_PARTITION}): rename "
            "the column, or write the upserts to a new table. Nothing was committed"
        )


def _lost(table: str, run_id: int) -> SinkCommit:
    raise ServiceError(
        f"run {run_id}'s MERGE snapshot of {table} is neither staged nor on the table's main "
        "branch (did another writer roll the table back, or expire it?). Nothing was committed "
        "to Postgres: look at the table's history, then run again"
    )


def _create(spark: SparkSession, table: str, source: DataFrame, spec: UpsertSpec) -> None:
    """The table with its key: required key columns, Iceberg's identifier fields (when the key
    is top-level columns of primitive types), the key in `drainer.primary_key`, WAP on."""
    keys = set(spec.keys)
    columns = ", ".join(
        f"{bq(f.name)} {f.dataType.simpleString()}" + (" NOT NULL" if f.name in keys else "")
        for f in source.schema.fields
    )
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {table.rsplit('.', 1)[0]}")
    properties = {
        "format-version": "2",
        "write.wap.enabled": "true",
        # merge-on-read writes position deletes, which read Iceberg's metadata column
        # `_partition`: the drain's own `_partition` (the Kafka partition) hides it
        "write.merge.mode": "copy-on-write",
        KEY_PROPERTY: spec.key_property(),
    }
    spark.sql(iceberg_state_table(table, columns, properties))
    kinds = {f.name: f.dataType.typeName() for f in source.schema.fields}
    if all(k in kinds and kinds[k] not in ("struct", "array", "map") for k in spec.keys):
        try:
            spark.sql(
                f"ALTER TABLE {table} SET IDENTIFIER FIELDS {', '.join(bq(k) for k in spec.keys)}"
            )
        except Exception as err:  # another attempt set them first
            if "CommitFailedException" not in str(err):
                raise
