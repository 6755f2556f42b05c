"""Delta upserts: one MERGE per run, exactly once by Delta's own transaction id.

Delta applies `txnAppId`/`txnVersion` to SQL DML through the session settings
`spark.databricks.delta.write.txnAppId`/`txnVersion` (the writer options cover DataFrame
appends only), so a resumed run's MERGE is skipped by Delta when an earlier attempt's landed.
Those settings, and the commit's `userMetadata` (the run's marker that `committed` finds), are
set on a session of the merge's own (`own_settings`), never on the session runs share.

The run's rows are read from Kafka once: the collapsed rows are cached (`read_once`) by the
counts' aggregation, the one action that reads them, and the MERGE takes them from that cache.
A table the run makes is made with its key and those rows in one commit (CREATE TABLE AS
SELECT under the same transaction settings), which is what a MERGE into it made empty would
write; its rows are counted without a look at it (each an insert or a delete marker).
The counts go into the commit's marker, so a resumed run that finds the commit reports them
as the attempt that made it counted them (spark_jobs.sinks.delta `_commit_of`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from drainer.errors import ServiceError
from drainer.lifecycle.results import RunContext
from drainer.sinks import SinkCommit
from drainer.sinks.upsert import KEY_PROPERTY, MergeMetered, UpsertSpec, check_key_unchanged
from spark_jobs.own_session import own_settings
from spark_jobs.sinks.base import fit_schema, marker, note_columns_added, run_of
from spark_jobs.sinks.delta import RECENT_COMMITS, DeltaSparkSink, app_id
from spark_jobs.sinks.upsert import (
    Counted,
    added_columns,
    collapse,
    counts_details,
    merge_sql,
    read_once,
    recorded_key,
    refill,
)

# a table made by another attempt of the run between the look and the create
_MADE_FIRST = ("Concurrent", "concurrent", "already exists", "TABLE_OR_VIEW_ALREADY_EXISTS")


def merge_delta(
    sink: DeltaSparkSink, spark: SparkSession, ctx: RunContext, out: DataFrame, spec: UpsertSpec
) -> SinkCommit:
    where = sink.location()
    table = f"delta.`{where}`"
    source = collapse(out, spec, where, fill=False)  # `read_once` fills tombstones' order
    existing = sink._schema(spark)
    if existing is None:
        made = _made_with_rows(sink, spark, ctx, out, source, spec)
        if made is not None:
            return made
        existing = sink._schema(spark)  # another attempt of the run made it first
        assert existing is not None
    check_key_unchanged(where, recorded_key(spark, table), spec)
    before = spark.read.format("delta").load(where)  # the table as the merge finds it
    note_columns_added(ctx, [n for n in source.columns if n not in existing.fieldNames()])
    if added_columns(spark, table, source, existing):
        existing = sink._schema(spark)
    written = _written(spark, ctx, where, out, source, spec, existing, before)
    with written as (rows, view, counts, merging):
        merging.sql(merge_sql(table, spec, rows.columns, view)).collect()
    return _landed(sink, spark, ctx, counts)


def _made_with_rows(
    sink: DeltaSparkSink,
    spark: SparkSession,
    ctx: RunContext,
    out: DataFrame,
    source: DataFrame,
    spec: UpsertSpec,
) -> SinkCommit | None:
    """A table the run makes: made with its key and the collapsed rows in one commit (CREATE
    TABLE AS SELECT, the run's transaction and marker on it), which is what a MERGE into the
    table made empty writes, without the MERGE's look at that empty table (its snapshot state
    computed, its files scanned for matches). None when another attempt of the run made the
    table first: the caller merges (Delta skips the MERGE when that attempt's commit is the
    run's)."""
    where = sink.location()
    with _written(spark, ctx, where, out, source, spec, None, None) as (_, view, counts, merging):
        made = (
            merging.table(view)  # the cache `read_once` filled
            .writeTo(f"delta.`{where}`")
            .using("delta")
            .tableProperty(KEY_PROPERTY, spec.key_property())
        )
        try:
            made.create()
        except Exception as err:
            if not any(c in str(err) for c in _MADE_FIRST):
                raise
            if sink._schema(spark) is not None:
                return None
            # a folder without a Delta table (an attempt that died writing the table left
            # its files, or the folder was made empty) is no table to Delta's create, but
            # is to its existence check: replaced. Another attempt of the run committing
            # in between holds the run's transaction, so Delta skips this replace.
            made.createOrReplace()
    return _landed(sink, spark, ctx, counts)


@contextmanager
def _written(
    spark: SparkSession,
    ctx: RunContext,
    where: str,
    out: DataFrame,
    source: DataFrame,
    spec: UpsertSpec,
    fitted: StructType | None,
    before: DataFrame | None,
) -> Iterator[tuple[DataFrame, str, Counted, SparkSession]]:
    """The run's collapsed rows fitted to the table's schema and read once (`read_once`:
    cached, their view, their counts against `before`, the table as the run finds it; None: a
    table the run makes), and a session of the write's own: the run's transaction
    (txnAppId/txnVersion) and its marker with the counts on whatever it commits. A MERGE's
    commit records its metrics: a run without deletes leaves most of its counts to them
    (`MergeMetered`)."""

    def shape(rows: DataFrame) -> DataFrame:
        return fit_schema(rows, fitted, where)

    drain, run_id, nonce, attempt = run_of(ctx)
    again = refill(out, spec, where, shape)
    metered = before is not None  # a MERGE's commit: its metrics complete the counts
    with (
        read_once(shape(source), spec, before, again, metered) as (rows, view, counts),
        own_settings(spark, keep_for="merge") as merging,
    ):
        if before is not None:
            # a MERGE, whose source is the cache `read_once` filled. Delta copies a source
            # that is not only Delta scans before it merges (its `auto`): a second copy of
            # the cache (0.17 s at 1M records). Its check that fails a cached source guards
            # cached Delta tables, whose version a cache does not pin; this source is a
            # bounded Kafka read, the same rows if Spark ever computes it again.
            merging.conf.set("spark.databricks.delta.merge.materializeSource", "none")
            merging.conf.set(
                "spark.databricks.delta.merge.failSourceCachedAfterMaterialization", "false"
            )
        merging.conf.set("spark.databricks.delta.write.txnAppId", app_id(drain, nonce))
        merging.conf.set("spark.databricks.delta.write.txnVersion", str(run_id))
        merging.conf.set(
            "spark.databricks.delta.commitInfo.userMetadata",
            counted_marker(drain, run_id, nonce, attempt, counts),
        )
        yield rows, view, counts, merging


def _landed(
    sink: DeltaSparkSink, spark: SparkSession, ctx: RunContext, counts: Counted
) -> SinkCommit:
    """The run's commit, found in the table's history after its write (with the counts of a
    metered merge completed from the commit's metrics)."""
    drain, run_id, nonce, attempt = run_of(ctx)
    done = sink._commit_of(spark, drain, run_id, nonce, latest=RECENT_COMMITS)
    if done is None:
        done = sink._commit_of(spark, drain, run_id, nonce)
    if done is None:
        raise ServiceError(
            f"run {run_id}'s write into {sink.location()} left no commit naming the run, and "
            f"Delta skipped it as already applied (app id {app_id(drain, nonce)}): the table's "
            "history no longer shows the attempt that landed. Nothing was committed to "
            "Postgres: look at the table's history, then run again"
        )
    if done.attempt != attempt or isinstance(counts, MergeMetered):
        return done  # the counts its marker has (an earlier attempt's write landed), or its metrics
    return replace(done, details=counts_details(counts))


def counted_marker(
    drain: str, run_id: int, nonce: str | None, attempt: int, counts: Counted
) -> str:
    """The run's marker with its merge's counts: the commit carries them for a resumed run."""
    data = json.loads(marker(drain, run_id, nonce, attempt)) | counts_details(counts)
    return json.dumps(data, separators=(",", ":"))
