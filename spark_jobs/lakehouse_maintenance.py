"""Many small files: compact a drain's lakehouse table and remove what no reader needs any more.

Each run appends a few files, so a drain that runs every five minutes leaves thousands of small
files. Delta: OPTIMIZE (compaction) then VACUUM (files unreferenced for longer than the
retention). Iceberg: rewrite_data_files, then expire_snapshots older than the retention (their
unreferenced files go with them). The retention is never below 7 days by default, so a reader
(time travel, a long query) of the last week keeps its files.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from drainer.config import DrainConfig
from drainer.errors import ConfigError
from drainer.services.lakehouse import catalog_name
from drainer.settings import load_settings
from spark_jobs import lakehouse
from spark_jobs.session import get_spark

log = logging.getLogger(__name__)

MIN_RETENTION_HOURS = 7 * 24


def maintain(
    drain: DrainConfig, retention_hours: float = MIN_RETENTION_HOURS, force: bool = False
) -> dict[str, Any]:
    """Compact the drain's table and expire what is older than `retention_hours`.

    Below 7 days only with `force` (readers of older versions lose their files). Returns what
    was done, for the CLI and the Dagster job.
    """
    if drain.sink.type not in ("delta", "iceberg"):
        raise ConfigError(
            f"drain '{drain.name}' writes to Postgres: table maintenance is for delta and "
            "iceberg sinks"
        )
    if retention_hours < MIN_RETENTION_HOURS and not force:
        raise ConfigError(
            f"--retention-hours {retention_hours:g} is below 7 days ({MIN_RETENTION_HOURS} h): "
            "readers of older versions would lose their files. Add --force if that is meant"
        )
    settings = load_settings()
    spark = get_spark(settings)
    lakehouse.prepare(spark, settings, drain)
    where = lakehouse.location(settings, drain)
    if drain.sink.type == "delta":
        return _maintain_delta(spark, where, retention_hours, force)
    return _maintain_iceberg(spark, drain, where, retention_hours)


# Delta's VACUUM lists the table's folders in this many tasks (Spark's default: 10,000), however
# few the folders are: on a local master that is 10,000 tasks on this machine's cores, ~40 s for
# a table of 8 files. A local master lists in as many tasks as it shuffles into (drainer's
# local default: 8); a cluster keeps its own setting.
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def _maintain_delta(spark: Any, where: str, hours: float, force: bool) -> dict[str, Any]:
    optimized = spark.sql(f"OPTIMIZE delta.`{where}`").collect()
    metrics = optimized[0]["metrics"] if optimized else None
    if force:  # Delta itself refuses a retention below its default (7 days) otherwise
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    listing = spark.conf.get(LISTING_PARALLELISM)
    local = str(spark.conf.get("spark.master", "")).startswith("local")
    if local:  # the session is shared by runs: set back below, as the retention check is
        spark.conf.set(LISTING_PARALLELISM, spark.conf.get("spark.sql.shuffle.partitions"))
    try:
        spark.sql(f"VACUUM delta.`{where}` RETAIN {hours:g} HOURS").collect()
    finally:
        if force:
            spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "true")
        if local:
            spark.conf.set(LISTING_PARALLELISM, listing)
    return {
        "format": "delta",
        "location": where,
        "files_removed": int(metrics["numFilesRemoved"]) if metrics else 0,
        "files_added": int(metrics["numFilesAdded"]) if metrics else 0,
        "retention_hours": hours,
    }


def _maintain_iceberg(spark: Any, drain: DrainConfig, where: str, hours: float) -> dict[str, Any]:
    catalog, table = catalog_name(drain.sink), drain.sink.table
    rewritten = spark.sql(f"CALL {catalog}.system.rewrite_data_files(table => '{table}')").collect()
    older_than = (datetime.now(UTC) - timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")
    dropped = _drop_stale_run_branches(spark, where, older_than)
    expired = spark.sql(
        f"CALL {catalog}.system.expire_snapshots(table => '{table}', "
        f"older_than => TIMESTAMP '{older_than}', retain_last => 1)"
    ).collect()
    row = rewritten[0] if rewritten else None
    return {
        "format": "iceberg",
        "location": where,
        "files_removed": int(row["rewritten_data_files_count"]) if row else 0,
        "files_added": int(row["added_data_files_count"]) if row else 0,
        "snapshots_expired_files": int(expired[0]["deleted_data_files_count"]) if expired else 0,
        "run_branches_dropped": dropped,
        "retention_hours": hours,
    }


def _drop_stale_run_branches(spark: Any, where: str, older_than: str) -> int:
    """Drop the branches crashed attempts left (`drainer_run_<id>_*`, never published).

    A run drops its own branches when it publishes; one whose client died mid-write leaves the
    Connect server to finish the write onto a branch nobody publishes. Only branches older than
    the retention go, so the branch of a run writing right now is never touched.
    """
    from pyspark.sql import functions as F

    stale = (
        spark.table(f"{where}.refs")
        .where(F.col("name").startswith(lakehouse.RUN_BRANCH_PREFIX))
        .join(spark.table(f"{where}.snapshots"), "snapshot_id")
        .where(F.col("committed_at") < F.lit(older_than).cast("timestamp"))
        .select("name")
        .collect()
    )
    for row in stale:
        lakehouse.alter_iceberg(spark, where, f"DROP BRANCH IF EXISTS {row['name']}")
    return len(stale)
