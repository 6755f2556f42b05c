"""Lakehouse sinks, Spark side: a run's output appended to a Delta or Iceberg table, exactly once.

The table commit carries the run's identity and happens before the Postgres commit of offsets
(drainer.lifecycle.commit). A resumed run first asks the table whether its commit already
happened; if so it writes nothing and commits Postgres only.
- Delta: writer options `txnAppId` (the drain) and `txnVersion` (the run id) make Delta itself
  skip a repeated write of the same run; `userMetadata` names the run in the table's history.
- Iceberg has no transaction id, but it refuses to publish one write-audit-publish id twice: the
  run appends to a branch of its own, tagged `wap.id=drainer:<drain>:<run>`, and cherry-picks
  that snapshot onto `main`. A second publish of the run (an earlier attempt's write that the
  Connect server finished after its client died, then published) fails in Iceberg's own commit
  validation, so the table holds the run once even when two attempts race.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StructType,
)

from drainer.config import DrainConfig
from drainer.config.kafka_clients import redact
from drainer.errors import CatalogUnavailable, ConfigError, ServiceError
from drainer.services.lakehouse import (
    EXTENSIONS,
    catalog_name,
    check_writable,
    delta_location,
    iceberg_catalog_conf,
    warehouse_uri,
)
from drainer.settings import Settings

log = logging.getLogger(__name__)

RUN_PROPERTY = "drainer.run-id"
DRAIN_PROPERTY = "drainer.drain"
WAP_ID = "wap.id"  # Iceberg's summary key of a staged write; kept by a fast-forward publish
PUBLISHED_WAP_ID = "published-wap-id"  # set instead when the publish replays the snapshot
RUN_BRANCH_PREFIX = "drainer_run_"
DELTA_RETRIES = 3
# a concurrent writer's commit came first: the same write again is safe (txnAppId/txnVersion);
# the second is the message of Delta's protocol and metadata conflicts, as when two writers
# create the table in an empty folder (a resumed run and its crashed attempt's write)
_DELTA_CONFLICTS = ("Concurrent", "concurrent update")
# Iceberg's REST client lost the catalog at the HTTP level (refused, unknown host, timed out):
# the same words whether Spark Connect or Py4J carries the error; the cause follows in the trace
_REST_UNREACHABLE = re.compile(r"RESTException\W+Error occurred while processing \w+ request")
_REST_CAUSE = re.compile(r"Caused by: [\w.$]*?(\w+Exception: [^\n]*)")
# an output column of the first type fits a table column of the second: cast, not an error
_WIDENINGS: set[tuple[type[DataType], type[DataType]]] = {
    (ByteType, ShortType),
    (ByteType, IntegerType),
    (ShortType, IntegerType),
    (ByteType, LongType),
    (ShortType, LongType),
    (IntegerType, LongType),
    (FloatType, DoubleType),
}


@dataclass(frozen=True)
class TableCommit:
    """The table commit a run made: for `drainer status` and the Dagster asset's metadata."""

    format: str
    location: str
    version: int  # Delta table version or Iceberg snapshot id
    files_added: int
    bytes_added: int
    rows_added: int


def location(settings: Settings, drain: DrainConfig) -> str:
    """The sink's table: a Delta location, or `catalog.namespace.table` for Iceberg."""
    sink = drain.sink
    if sink.type == "delta":
        return delta_location(settings, sink)
    return f"{catalog_name(sink)}.{sink.table}"


def data_folder(settings: Settings, drain: DrainConfig) -> Path | None:
    """The local folder holding the table's files (fault injection), or None off this machine."""
    sink = drain.sink
    if sink.type == "delta":
        where = delta_location(settings, sink)
    elif sink.catalog is None:  # the JDBC catalog's default layout: <warehouse>/<ns>/<table>
        where = f"{warehouse_uri(settings)}/{(sink.table or '').replace('.', '/')}"
    else:
        return None
    if where.startswith("file://"):
        return Path(urlparse(where).path)
    return None if "://" in where else Path(where)


def prepare(spark: SparkSession, settings: Settings, drain: DrainConfig) -> None:
    """Check that the session can write the sink's format, and define its Iceberg catalog."""
    fmt = drain.sink.type
    loaded = spark.conf.get("spark.sql.extensions", "") or ""
    if EXTENSIONS[fmt] not in loaded:
        raise ServiceError(
            f"drain '{drain.name}' writes a {fmt} table, but this Spark was started without "
            f"the {fmt} jars and SQL extension: run `drainer services up` (it restarts the "
            "local Connect server with the jars the drains file needs), or start your server "
            "with the jars and settings in docs/lakehouse.md"
        )
    if settings.spark_remote is None:  # this machine's file system is the server's
        check_writable(settings, drain.sink)
    if fmt == "iceberg":
        for key, value in iceberg_catalog_conf(settings, drain.sink).items():
            if spark.conf.get(key, None) != value:
                spark.conf.set(key, value)


def catalog_unreachable(err: BaseException, drain: DrainConfig) -> CatalogUnavailable | None:
    """The drain's own Iceberg catalog did not answer, as one line naming it and its uri; else
    None. Spark's error names neither the catalog nor the setting, only a GET that failed."""
    catalog = drain.sink.catalog
    text = str(err)
    if catalog is None or not _REST_UNREACHABLE.search(text):
        return None
    cause = _REST_CAUSE.search(text)
    why = cause.group(1).strip() if cause else "no answer"
    return CatalogUnavailable(
        redact(
            f"the Iceberg catalog '{catalog.name}' of drain '{drain.name}' did not answer at "
            f"sink.catalog.uri {catalog.uri} ({why}). Nothing was committed: start the catalog "
            f"there, or correct sink.catalog.uri in the drains file, then `drainer run "
            f"{drain.name}` again: the run resumes with the same ranges."
        )
    )


def committed(
    spark: SparkSession, settings: Settings, drain: DrainConfig, run_id: int
) -> TableCommit | None:
    """The table commit of run `run_id` if the table already holds it, else None."""
    if drain.sink.type == "delta":
        return _delta_commit(spark, location(settings, drain), drain.name, run_id)
    return _iceberg_commit(spark, location(settings, drain), drain.name, run_id)


def write(
    spark: SparkSession, settings: Settings, drain: DrainConfig, run_id: int, out: DataFrame
) -> TableCommit:
    """Append the run's output, tagged with the run; returns the commit it made.

    The output's schema is checked against the table's first: a new column is added, a column
    whose type changed is a ConfigError naming it, before anything is written.
    """
    where = location(settings, drain)
    if drain.sink.type == "delta":
        return _write_delta(spark, where, drain.name, run_id, out)
    return _write_iceberg(spark, where, drain.name, run_id, out)


def _delta_app_id(drain: str) -> str:
    return f"drainer:{drain}"


def _marker(drain: str, run_id: int) -> str:
    return json.dumps({DRAIN_PROPERTY: drain, RUN_PROPERTY: run_id}, separators=(",", ":"))


def _missing_table(err: Exception) -> bool:
    text = str(err)
    return any(
        sign in text
        for sign in (
            "DELTA_MISSING_DELTA_TABLE",
            "is not a Delta table",
            "TABLE_OR_VIEW_NOT_FOUND",
            "PATH_NOT_FOUND",
            "NoSuchTableException",
        )
    )


def _delta_history(spark: SparkSession, where: str) -> DataFrame | None:
    try:
        history = spark.sql(f"DESCRIBE HISTORY delta.`{where}`")
        history.schema  # noqa: B018  (analysis: fails here when there is no table)
        return history
    except Exception as err:
        if _missing_table(err):
            return None
        raise


def _delta_commit(spark: SparkSession, where: str, drain: str, run_id: int) -> TableCommit | None:
    history = _delta_history(spark, where)
    if history is None:
        return None
    rows = history.where(F.col("userMetadata") == _marker(drain, run_id)).collect()
    if not rows:
        return None
    row = rows[0]
    metrics: dict[str, Any] = row["operationMetrics"] or {}
    return TableCommit(
        "delta",
        where,
        int(row["version"]),
        int(metrics.get("numFiles", 0) or 0),
        int(metrics.get("numOutputBytes", 0) or 0),
        int(metrics.get("numOutputRows", 0) or 0),
    )


def _delta_schema(spark: SparkSession, where: str) -> StructType | None:
    if _delta_history(spark, where) is None:
        return None
    return spark.read.format("delta").load(where).schema


def _write_delta(
    spark: SparkSession, where: str, drain: str, run_id: int, out: DataFrame
) -> TableCommit:
    out = _fit_schema(out, _delta_schema(spark, where), where)
    for attempt in range(1, DELTA_RETRIES + 1):
        try:
            (
                out.write.format("delta")
                .mode("append")
                .option("mergeSchema", "true")
                .option("txnAppId", _delta_app_id(drain))
                .option("txnVersion", str(run_id))
                .option("userMetadata", _marker(drain, run_id))
                .save(where)
            )
            break
        except Exception as err:
            if attempt == DELTA_RETRIES or not any(c in str(err) for c in _DELTA_CONFLICTS):
                raise
            log.warning("Delta conflict writing %s (attempt %d): retrying", where, attempt)
            time.sleep(0.5 * attempt)
    done = _delta_commit(spark, where, drain, run_id)
    if done is None:
        raise ConfigError(
            f"Delta skipped the write of run {run_id} to {where}: its transaction for app id "
            f"{_delta_app_id(drain)} is already at or past version {run_id}, so the table has "
            "seen this drain from another drainer database (was the database reset?). Nothing "
            "was committed: point sink.path at a new table, or drop the old one"
        )
    return done


def wap_id(drain: str, run_id: int) -> str:
    """The run's write-audit-publish id: Iceberg publishes a given id at most once."""
    return f"drainer:{drain}:{run_id}"


def _iceberg_commit(spark: SparkSession, table: str, drain: str, run_id: int) -> TableCommit | None:
    """The run's published snapshot: on `main`'s line, by its WAP id (or, for snapshots written
    before WAP publishing, by its run property); a staged or branch snapshot does not count."""
    wap = wap_id(drain, run_id)
    summary = F.col("summary")
    try:  # loaded from the catalog itself (not a listing): a table another client made too
        spark.catalog.refreshTable(table)
        rows = (
            spark.table(f"{table}.history")
            .where(F.col("is_current_ancestor"))
            .join(spark.table(f"{table}.snapshots"), "snapshot_id")
            .where(
                (summary[WAP_ID] == wap)
                | (summary[PUBLISHED_WAP_ID] == wap)
                | ((summary[RUN_PROPERTY] == str(run_id)) & (summary[DRAIN_PROPERTY] == drain))
            )
            .select("snapshot_id", "summary")
            .collect()
        )
    except Exception as err:
        if _missing_table(err):
            return None
        raise
    if not rows:
        return None
    found = rows[0]["summary"] or {}
    return TableCommit(
        "iceberg",
        table,
        int(rows[0]["snapshot_id"]),
        int(found.get("added-data-files", 0) or 0),
        int(found.get("added-files-size", 0) or 0),
        int(found.get("added-records", 0) or 0),
    )


def _iceberg_schema(spark: SparkSession, table: str) -> StructType | None:
    try:
        return spark.table(table).schema
    except Exception as err:
        if _missing_table(err):
            return None
        raise


def _write_iceberg(
    spark: SparkSession, table: str, drain: str, run_id: int, out: DataFrame
) -> TableCommit:
    existing = _iceberg_schema(spark, table)
    if existing is None:
        namespace = table.rsplit(".", 1)[0]
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        # created empty from the output's columns, so that the run's append is one snapshot
        try:
            spark.createDataFrame([], out.schema).writeTo(table).using("iceberg").create()
        except Exception as err:
            # another attempt of the run created it first (Spark's or Iceberg's own error)
            if "ALREADY_EXISTS" not in str(err) and "AlreadyExistsException" not in str(err):
                raise
        existing = spark.table(table).schema
    out = _fit_schema(out, existing, table)
    added = [f for f in out.schema.fields if f.name not in existing.fieldNames()]
    if added:  # schema evolution: Iceberg adds columns by metadata, no data is rewritten
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in added)
        spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({columns})")
        existing = spark.table(table).schema
        out = _fit_schema(out, existing, table)
    _publish_once(spark, table, drain, run_id, out)
    done = _iceberg_commit(spark, table, drain, run_id)
    if done is None:
        raise ServiceError(
            f"run {run_id}'s snapshot of {table} was published, but is not on the table's main "
            "branch (did another writer roll the table back?). Nothing was committed to "
            "Postgres: look at the table's history, then run again"
        )
    return done


def _publish_once(spark: SparkSession, table: str, drain: str, run_id: int, out: DataFrame) -> None:
    """Append on a branch of this attempt's own, then cherry-pick it onto main, once.

    The attempt's branch keeps a write the Connect server finishes for a dead client off main;
    the cherry-pick is where Iceberg checks that the run's WAP id is not published yet, in the
    commit itself, so two attempts of a run cannot both land.
    """
    wap = wap_id(drain, run_id)
    branch = f"{RUN_BRANCH_PREFIX}{run_id}_{uuid.uuid4().hex[:8]}"
    catalog, short = table.split(".", 1)
    alter_iceberg(spark, table, f"CREATE BRANCH {branch}")
    (
        out.writeTo(f"{table}.branch_{branch}")
        .option(f"snapshot-property.{WAP_ID}", wap)
        .option(f"snapshot-property.{RUN_PROPERTY}", str(run_id))
        .option(f"snapshot-property.{DRAIN_PROPERTY}", drain)
        .append()
    )
    refs = spark.table(f"{table}.refs")
    head = refs.where(F.col("name") == branch).select("snapshot_id").collect()[0][0]
    try:
        spark.sql(
            f"CALL {catalog}.system.cherrypick_snapshot(table => '{short}', snapshot_id => {head})"
        ).collect()
    except Exception as err:
        if "DuplicateWAPCommitException" not in str(err) and "published already" not in str(err):
            raise
        log.warning(
            "run %d: an earlier attempt already published its write to %s; this attempt's "
            "branch is dropped unpublished",
            run_id,
            table,
        )
    # this run's branches (this attempt's, and any a crashed attempt left) hold nothing unpublished
    spark.catalog.refreshTable(table)
    mine = refs.where(F.col("name").startswith(f"{RUN_BRANCH_PREFIX}{run_id}_")).collect()
    for row in mine:
        alter_iceberg(spark, table, f"DROP BRANCH IF EXISTS {row['name']}")


def alter_iceberg(spark: SparkSession, table: str, change: str, tries: int = 5) -> None:
    """`ALTER TABLE table change`, again on a lost commit race: unlike a write, Iceberg's
    ALTER TABLE gives up when another commit (an append, a branch) came first."""
    for attempt in range(1, tries + 1):
        try:
            spark.sql(f"ALTER TABLE {table} {change}")
            return
        except Exception as err:
            if attempt == tries or "CommitFailedException" not in str(err):
                raise
            log.info("%s: %s lost a commit race (attempt %d): again", table, change, attempt)
            spark.catalog.refreshTable(table)
            time.sleep(0.2 * attempt)


def _fit_schema(out: DataFrame, table: StructType | None, where: str) -> DataFrame:
    """The output shaped for the table: widened where safe, missing columns as nulls.

    A column whose type cannot be stored in the table's column is a ConfigError naming it,
    raised before anything is written; new columns pass through (schema evolution).
    """
    if table is None:
        return out
    have = {f.name: f for f in out.schema.fields}
    selected = []
    for field in table.fields:
        mine = have.get(field.name)
        if mine is None:
            selected.append(F.lit(None).cast(field.dataType).alias(field.name))
            continue
        if mine.dataType != field.dataType:
            if (type(mine.dataType), type(field.dataType)) not in _WIDENINGS:
                raise ConfigError(
                    f"output column {field.name} is {mine.dataType.simpleString()}, but the "
                    f"table {where} stores it as {field.dataType.simpleString()}: cast it in "
                    "the processor (or handler's output_schema) to the table's type, or write "
                    "to a new table. Nothing was committed"
                )
            selected.append(F.col(f"`{field.name}`").cast(field.dataType).alias(field.name))
            continue
        selected.append(F.col(f"`{field.name}`"))
    known = set(table.fieldNames())
    selected += [F.col(f"`{f.name}`") for f in out.schema.fields if f.name not in known]
    return out.select(*selected)
