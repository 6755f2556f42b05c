"""Many small files: compact a drain's table and remove what no reader needs any more.

Each run appends a few files, so a drain that runs every five minutes leaves thousands of small
files. The sink does its own (`SparkSink.maintain_table`: Delta OPTIMIZE then VACUUM, Iceberg
rewrite_data_files then expire_snapshots); this module checks the retention and gives it a
session. The retention is never below 7 days by default, so a reader (time travel, a long
query) of the last week keeps its files. `drainer maintain` and the Dagster maintenance job
call it under the drain's lease (drainer.lifecycle.upkeep).
"""

from __future__ import annotations

from typing import Any

from drainer.config import DrainConfig
from drainer.errors import ConfigError
from drainer.settings import Settings
from spark_jobs.session import get_spark
from spark_jobs.sinks import spark_sink_for

MIN_RETENTION_HOURS = 7 * 24


def maintain(
    drain: DrainConfig,
    retention_hours: float = MIN_RETENTION_HOURS,
    force: bool = False,
    *,
    settings: Settings,
    keep_hours: float | None = None,
) -> dict[str, Any]:
    """Compact the drain's table and expire what is older than `retention_hours`, but never
    what the last `keep_hours` committed (an open plan's table commit: its proof).

    Below 7 days only with `force` (readers of older versions lose their files). Returns what
    was done, for the CLI and the Dagster job.
    """
    sink = spark_sink_for(drain.sink, settings, drain.name)
    if not sink.capabilities.table_maintenance:
        raise ConfigError(
            f"drain '{drain.name}' writes to a {sink.describe()}: table maintenance is for "
            "table formats (delta, iceberg); `drainer maintain` folds and prunes it"
        )
    if retention_hours < MIN_RETENTION_HOURS and not force:
        raise ConfigError(
            f"--retention-hours {retention_hours:g} is below 7 days ({MIN_RETENTION_HOURS} h): "
            "readers of older versions would lose their files. Add --force if that is meant"
        )
    spark = get_spark(settings)
    sink.prepare(spark, drain.name)
    kept = max(retention_hours, keep_hours or 0.0)
    done = sink.maintain_table(spark, kept, force)
    done["open_plan_kept_hours"] = None if keep_hours is None else round(keep_hours, 2)
    return done
