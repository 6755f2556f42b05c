"""State tables on Spark: a run's rows collapsed to one per key, and the MERGE that applies
them to a Delta or Iceberg table (drainer.sinks.upsert states the rules).

`flag_records` marks tombstones and null keys on the decoded read (a null key is a bad record,
failed or dead-lettered per `bad_records`); `collapse` keeps each key's newest row with a
window function; `merge_sql` is the one MERGE both table formats run, its source the collapsed
rows. `read_once` caches those rows for the counts and the MERGE, so the run's records are read
from Kafka once (twice in a run whose tombstones take their order from the row before them,
the second time for their keys only).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from drainer.config import DrainConfig
from drainer.config.sink_models import top_column
from drainer.sinks.upsert import (
    DELETED_AT,
    KEY_PROPERTY,
    TOMBSTONE,
    MergeMetered,
    UpsertCounts,
    UpsertSpec,
    check_columns,
    kept_order,
    newer,
    ref,
    upsert_spec,
)
from drainer.store.upserts import markers_past_retention
from spark_jobs.decode import ERROR, QUICK_ERROR, RAW_VALUE
from spark_jobs.session import cores

_DELETE = "_drainer_delete"
_RANK = "_drainer_rank"
# order columns a tombstone always has (the record's own metadata): nothing to fill
_RECORD_ORDER = {"_timestamp", "_level", "_partition", "_offset", "_topic"}
_POSITION = ("_topic", "_partition", "_offset")


def bq(name: str) -> str:
    """A Spark SQL identifier, backquoted."""
    return "`" + name.replace("`", "``") + "`"


def path_col(path: str) -> Column:
    """An output column, or a struct column's field (`_key.id`)."""
    return F.col(".".join(bq(p) for p in path.split(".")))


def flag_records(drain: DrainConfig, decoded: DataFrame) -> DataFrame:
    """The decoded read with tombstones marked and a null primary key as the record's error
    (a bad record: `bad_records` fails the run on it or dead-letters it); unchanged for an
    append sink."""
    spec = upsert_spec(drain.sink)
    if spec is None:
        return decoded
    columns = set(decoded.columns)
    reason = None
    for path in spec.keys:
        if top_column(path) in columns:  # else the processor makes it: `collapse` checks
            null_key = F.when(path_col(path).isNull(), F.lit(f"primary key {path} is null"))
            reason = null_key if reason is None else F.coalesce(reason, null_key)
    flagged = {TOMBSTONE: F.col(RAW_VALUE).isNull()}
    if reason is not None:
        flagged |= {c: F.coalesce(F.col(c), reason) for c in (ERROR, QUICK_ERROR)}
    return decoded.withColumns(flagged)


def collapse(out: DataFrame, spec: UpsertSpec, where: str, fill: bool = True) -> DataFrame:
    """The run's rows, one per key: the newest by `order_by`, a delete before an upsert of the
    same order, then by level, partition and offset. A delete's row carries `_deleted_at` (the
    merge's time); a tombstone without order values takes those of the key's row before it in
    its own partition, which is what it deletes. The metadata columns the table does not keep
    (`spec.unwritten`, which broke the ties) are left out.

    `fill=False` leaves tombstones without order values, so they rank first (`read_once` then
    collapses the keys whose newest row is one of them again): the window's first step, each
    task's newest row per key, then runs before the shuffle, as in a hand-written dedupe. The
    tombstones' window needs every row shuffled (5x the bytes at 10 versions a key)."""
    columns = out.columns
    check_columns(spec, columns, where)
    tomb = F.coalesce(F.col(TOMBSTONE), F.lit(False)) if TOMBSTONE in columns else F.lit(False)
    delete = tomb
    if spec.delete_when:
        delete = delete | F.coalesce(F.expr(spec.delete_when), F.lit(False))
    keys = [path_col(p) for p in spec.keys]
    null_key = F.lit(False)
    for k in keys:
        null_key = null_key | k.isNull()
    where_of = (
        F.concat_ws("", F.col("_topic"), F.lit("["), F.col("_partition"), F.lit("]@"), "_offset")
        if set(_POSITION) <= set(columns)
        else F.lit("a row")
    )
    message = F.concat(
        F.lit("drainer bad record "),  # as spark_jobs.bad_records raises, so it reads alike
        where_of,
        F.lit(f": primary key [{', '.join(spec.keys)}] has a null column"),
    )
    rows = out.withColumn(_DELETE, delete).where(
        F.when(null_key, F.raise_error(message)).otherwise(F.lit(True))
    )
    if fill:
        rows = _fill_tombstone_order(rows, spec, columns)
    by_key = Window.partitionBy(*keys).orderBy(
        *[path_col(c).desc_nulls_first() for c in spec.order],
        F.col(_DELETE).desc(),
        *[F.col(c).desc() for c in spec.tie_breakers(columns)],
    )
    newest = rows.withColumn(_RANK, F.row_number().over(by_key)).where(F.col(_RANK) == 1)
    kept = [bq(c) for c in columns if c != TOMBSTONE and c not in spec.unwritten]
    # the merge's time as a literal, not `current_timestamp()`: a plan holding that expression
    # never matches the cache `read_once` makes, and the MERGE would read Kafka again
    merged_at = F.lit(datetime.now(UTC))
    deleted_at = F.when(F.col(_DELETE), merged_at).cast("timestamp")
    return newest.select(*kept, deleted_at.alias(DELETED_AT))


def fills(spec: UpsertSpec, columns: Sequence[str]) -> bool:
    """Whether a tombstone can take its order values from the row before it (`collapse`): an
    order column that is not the record's own metadata, and the records' positions."""
    fillable = [c for c in spec.order if "." not in c and c not in _RECORD_ORDER]
    return bool(fillable) and set(_POSITION) <= set(columns)


def unordered_delete(spec: UpsertSpec, alias: str = "") -> Column:
    """A collapsed row that is a delete without order values: its key's rows are collapsed
    again with the tombstones' order filled in (`alias`: of the collapsed rows in a join)."""
    at = f"{alias}." if alias else ""
    found = path_col(f"{at}{DELETED_AT}").isNotNull()
    for c in spec.order:
        found = found & path_col(f"{at}{c}").isNull()
    return found


def _fill_tombstone_order(rows: DataFrame, spec: UpsertSpec, columns: Sequence[str]) -> DataFrame:
    """A delete whose order columns are all null orders as the key's row before it in the same
    Kafka partition (offset order): a tombstone deletes the version it follows.

    The window is the key's alone, ordered by topic, partition and offset, as `collapse`'s is
    the key's: both run on one shuffle of the rows by key (a window per (key, topic,
    partition) shuffled every row a second time). The key's last ordered row before this one
    is of the same Kafka partition, or that partition has none before it."""
    if not fills(spec, columns):
        return rows
    fillable = [c for c in spec.order if "." not in c and c not in _RECORD_ORDER]
    all_null = F.lit(True)
    for c in spec.order:
        all_null = all_null & path_col(c).isNull()
    before = (
        Window.partitionBy(*[path_col(p) for p in spec.keys])
        .orderBy(*_POSITION)
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    source = F.struct(*[F.col(c) for c in _POSITION[:2]], *[path_col(c) for c in fillable])
    previous = F.last(F.when(~all_null, source), True)
    rows = rows.withColumn("_drainer_before", previous.over(before))
    prior = F.col("_drainer_before")
    same_partition = (prior.getField("_topic") == F.col("_topic")) & (
        prior.getField("_partition") == F.col("_partition")
    )
    fill = F.col(_DELETE) & all_null & F.coalesce(same_partition, F.lit(False))
    filled = {c: F.when(fill, prior.getField(c)).otherwise(F.col(bq(c))) for c in fillable}
    return rows.withColumns(filled).drop("_drainer_before")


Refill = Callable[[DataFrame], DataFrame]


def refill(
    out: DataFrame, spec: UpsertSpec, where: str, shape: Callable[[DataFrame], DataFrame]
) -> Refill | None:
    """How `read_once` collapses again, tombstones' order filled in, the rows of the keys a
    DataFrame of key columns `_drainer_k0`.. names (`shape`: what the sink does to collapsed
    rows); None when no tombstone takes an order (`fills`)."""
    if not fills(spec, out.columns):
        return None

    def again(keys: DataFrame) -> DataFrame:
        same = F.lit(True)
        for i, path in enumerate(spec.keys):
            same = same & (path_col(path) == F.col(f"_drainer_k{i}"))
        mine = out.join(F.broadcast(keys), same, "left_semi")  # the keys are few: no shuffle
        return shape(collapse(mine, spec, where))

    return again


@contextmanager
def read_once(
    source: DataFrame,
    spec: UpsertSpec,
    table: DataFrame | None,
    again: Refill | None = None,
    metered: bool = False,
) -> Iterator[tuple[DataFrame, str, Counted]]:
    """The collapsed rows cached, a global temporary view of them (its qualified name) for
    the MERGE that runs in a session of its own (`own_settings`), and the merge's counts
    (`count_changes` against `table` as the run finds it; None: a table the run makes with
    these rows). The counts are the first action on the rows: it reads Kafka and fills the
    cache and the read's observation in one job, and the MERGE reads the cache. A DataFrame
    argument of that session's `spark.sql` (`{src}`) missed the cache (the records were read
    and processed again); the view, shared by the server's sessions, holds the very plan that
    was cached.

    `source` collapsed without the tombstones' order (`collapse(fill=False)`), `again`
    (`refill`) collapses the keys whose newest row is a delete without order values once more,
    with it: the counts' aggregation counts those rows too, and Kafka is read a second time
    (and the rows counted again) only in a run with such a key, for its rows only.
    The cache has one partition per core: the MERGE writes a file per partition, and Spark
    does not coalesce a cached plan's partitions itself. `metered`: a merge whose commit
    records its metrics (Delta's), for `count_changes`."""
    spark = source.sparkSession
    tasks = cores(spark)
    made: list[tuple[DataFrame, str]] = []

    def cached(rows: DataFrame) -> tuple[DataFrame, str]:
        kept = (rows.coalesce(tasks) if tasks else rows).persist()
        name = f"drainer_merge_{uuid.uuid4().hex}"  # runs share the server: one view each
        made.append((kept, name))
        kept.createOrReplaceGlobalTempView(name)
        return kept, name

    try:
        rows, name = cached(source)
        # the first action: it holds the read's observation (a plan of the view would not)
        counts, unordered = count_changes(
            rows, table, spec, unordered=again is not None, metered=metered
        )
        if again is not None and unordered:
            first = spark.table(f"global_temp.{name}")
            keys = first.where(unordered_delete(spec)).select(
                *[path_col(k).alias(f"_drainer_k{i}") for i, k in enumerate(spec.keys)]
            )
            rows, name = cached(first.where(~unordered_delete(spec)).unionByName(again(keys)))
            counts, _ = count_changes(rows, table, spec, metered=metered)
        yield rows, f"global_temp.{name}", counts
    finally:
        for kept, view in made:  # quietly: a server lost mid-merge fails these too
            with contextlib.suppress(Exception):
                spark.catalog.dropGlobalTempView(view)
            with contextlib.suppress(Exception):
                kept.unpersist()


def merge_sql(target: str, spec: UpsertSpec, columns: Sequence[str], source: str = "{src}") -> str:
    """MERGE of the collapsed rows (`source`: a table or view, or by default `{src}`, a
    DataFrame argument of `spark.sql`) into the table: a newer version replaces the row (a
    delete replaces it with its marker, keeping the row's order when it has none), a new key is
    inserted; an older version changes nothing."""
    on = " AND ".join(f"{ref('t', k, bq)} = {ref('s', k, bq)}" for k in spec.keys)
    order_top = {c for c in spec.order if "." not in c}
    sets = ", ".join(
        f"t.{bq(c)} = "
        + (kept_order("s", "t", c, spec.order, bq) if c in order_top else f"s.{bq(c)}")
        for c in columns
    )
    names = ", ".join(bq(c) for c in columns)
    values = ", ".join(f"s.{bq(c)}" for c in columns)
    return (
        f"MERGE INTO {target} t USING {source} s ON {on} "
        f"WHEN MATCHED AND ({newer('s', 't', spec.order, bq)}) THEN UPDATE SET {sets} "
        f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
    )


Counted = UpsertCounts | MergeMetered


def count_changes(
    source: DataFrame,
    table: DataFrame | None,
    spec: UpsertSpec,
    unordered: bool = False,
    metered: bool = False,
) -> tuple[Counted, int]:
    """What the merge of `source` into `table` (as it is before the merge; None: a table the
    run makes with these rows, each an insert or a delete marker) does, per row: the same
    condition as the MERGE, evaluated in one aggregation; with `unordered`, the same
    aggregation also counts the deletes without order values (`read_once`), else that count
    is 0.

    `metered` (a merge whose commit records its metrics): the first aggregation joins the
    rows with the table's delete markers only (Delta's file statistics skip every file
    without one); a run without deletes counts there the keys it revives from markers and
    leaves the rest to the commit's metrics (`MergeMetered`); a run with deletes then joins
    the cached rows with the whole table, as an unmetered merge does."""
    deleted = F.col(f"s.{bq(DELETED_AT)}").isNotNull()
    extra = [F.count_if(unordered_delete(spec, "s")).alias("unordered")] if unordered else []
    newer_than_t = F.coalesce(F.expr(newer("s", "t", spec.order, bq)), F.lit(False))
    if table is None:
        row = (
            source.alias("s")
            .agg(
                F.count_if(~deleted).alias("inserted"),
                F.count_if(deleted).alias("deleted"),
                *extra,
            )
            .first()
        )
        assert row is not None
        counts = UpsertCounts(inserted=int(row["inserted"]), deleted=int(row["deleted"]))
        return counts, int(row["unordered"]) if unordered else 0
    if metered:  # the table's delete markers only: its files without any are skipped
        markers = _compared(table, spec).where(F.col(bq(DELETED_AT)).isNotNull())
        on_marker = source.alias("s").join(markers.alias("t"), _same_key(spec), "left")
        revives = F.col(f"t.{bq(DELETED_AT)}").isNotNull() & ~deleted & newer_than_t
        row = on_marker.agg(
            F.count_if(deleted).alias("deleted"), F.count_if(revives).alias("revived"), *extra
        ).first()
        assert row is not None
        if int(row["deleted"]) == 0:
            found = int(row["unordered"]) if unordered else 0
            return MergeMetered(revived=int(row["revived"])), found
    joined = source.alias("s").join(_compared(table, spec).alias("t"), _same_key(spec), "left")
    matched = F.col(f"t.{bq(DELETED_AT)}").isNotNull() | _any_key(spec, "t")
    applies = ~matched | newer_than_t
    live_before = matched & F.col(f"t.{bq(DELETED_AT)}").isNull()
    row = joined.agg(
        F.count_if(applies & ~deleted & ~live_before).alias("inserted"),
        F.count_if(applies & ~deleted & live_before).alias("updated"),
        F.count_if(applies & deleted).alias("deleted"),
        F.count_if(~applies).alias("skipped"),
        *extra,
    ).first()
    assert row is not None
    counts = UpsertCounts(*(int(row[k]) for k in ("inserted", "updated", "deleted", "skipped")))
    return counts, int(row["unordered"]) if unordered else 0


def _compared(table: DataFrame, spec: UpsertSpec) -> DataFrame:
    """The table's columns a merge compares a row with: key, order, delete marker."""
    wanted = [*{top_column(p) for p in (*spec.keys, *spec.order)}, DELETED_AT]
    return table.select(*[bq(c) for c in wanted])


def _same_key(spec: UpsertSpec) -> list[Column]:
    """The join of the rows (`s`) with the table (`t`) on the key."""
    return [path_col(f"s.{k}") == path_col(f"t.{k}") for k in spec.keys]


def _any_key(spec: UpsertSpec, alias: str) -> Column:
    found = F.lit(False)
    for k in spec.keys:
        found = found | path_col(f"{alias}.{k}").isNotNull()
    return found


def counts_details(counts: Counted) -> dict[str, Any]:
    """The counts as a table commit's details (status, Dagster metadata), or what a metered
    merge's marker holds of them (`MergeMetered`)."""
    return {"upsert": counts.details() if isinstance(counts, MergeMetered) else counts.as_dict()}


def table_ddl(schema: Any) -> str:
    """Columns of a CREATE TABLE, from a Spark schema."""
    return ", ".join(f"{bq(f.name)} {f.dataType.simpleString()}" for f in schema.fields)


def recorded_key(spark: SparkSession, table: str) -> list[str] | None:
    """The primary key a table was made with (its `drainer.primary_key` property), or None."""
    for row in spark.sql(f"SHOW TBLPROPERTIES {table}").collect():
        if row["key"] == KEY_PROPERTY:
            return str(row["value"]).split(",")
    return None


def added_columns(spark: SparkSession, table: str, source: DataFrame, existing: Any) -> list[str]:
    """Add the source's columns the table lacks (schema evolution, as appends do); their names."""
    added = [f for f in source.schema.fields if f.name not in existing.fieldNames()]
    if added:
        spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({table_ddl(StructType(added))})")
    return [f.name for f in added]


def drop_old_markers(spark: SparkSession, table: str, config: Any) -> int:
    """`drainer maintain` of a state table: delete markers older than `delete_retention` go
    (an older version drained after that could bring its row back: the retention is the
    promise). Returns how many; 0 for an append table."""
    spec = upsert_spec(config)
    if spec is None:
        return 0
    cutoff = datetime.now(UTC) - timedelta(milliseconds=spec.retention_ms)
    text = cutoff.strftime("%Y-%m-%d %H:%M:%S")
    before = spark.table(table).where(F.col(DELETED_AT) < F.lit(text).cast("timestamp")).count()
    if before:
        spark.sql(markers_past_retention(table, text, bq)).collect()
    return before
