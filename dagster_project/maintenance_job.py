"""Dagster job and schedule for a drain's daily maintenance (`drainer maintain`).

Every drain: its Postgres sink's partitions folded to the end and its history pruned, so the
runs' own upkeep never has to make a big fold (docs/operations.md, "Big folds stay out of the
runs"). A Delta or Iceberg drain: its table compacted and what is older than 7 days expired.
It runs daily, off the drain's own runs (it waits for a run in progress), and records what it
did as an observation of the drain's asset, so the UI shows it beside the materializations.
"""

from typing import Any

import dagster as dg

from dagster_project.resources import DrainerResource
from drainer.config import DrainConfig
from drainer.sinks import sink_for

MAINTENANCE_CRON = "0 3 * * *"  # daily, at an hour with few runs
LEASE_WAIT_S = 600.0  # how long it waits for a run of the drain to finish


def maintenance_job(drain: DrainConfig, resource: DrainerResource) -> dg.JobDefinition:
    """The drain's daily upkeep; `resource` (the one the definitions bind) names its sink while
    the definitions load, the run's own resource hands the run its settings."""
    sink = sink_for(drain.sink, resource.settings(), drain.name)
    tables = sink.capabilities.table_maintenance

    @dg.op(name=f"{drain.name}_maintain_table")
    def _maintain(context: dg.OpExecutionContext, drainer: DrainerResource) -> None:
        from drainer.lifecycle.upkeep import maintain_drain
        from spark_jobs.table_maintenance import maintain

        settings = drainer.settings()

        def table(d: DrainConfig, keep_hours: float | None) -> dict[str, Any]:
            return maintain(d, settings=settings, keep_hours=keep_hours)

        upkeep = maintain_drain(
            drain, wait_s=LEASE_WAIT_S, table=table if tables else None, settings=settings
        )
        metadata: dict[str, Any] = {  # numbers and texts: Dagster wraps them
            "maintenance_partitions_before": upkeep.sink.before,
            "maintenance_partitions_after": upkeep.sink.after,
            "maintenance_folds": upkeep.sink.folds,
            "maintenance_runs_pruned": upkeep.history.runs,
        }
        if upkeep.table is not None:
            metadata.update({f"maintenance_{key}": value for key, value in upkeep.table.items()})
        context.log_event(dg.AssetObservation(asset_key=drain.name, metadata=metadata))

    # the sink says what its upkeep is: a table compacted, partitions folded, or nothing
    what = sink.upkeep_words()
    done = f"{what}, and prunes" if what else "prunes"

    @dg.job(
        name=f"{drain.name}_table_maintenance",
        description=f"Daily `drainer maintain` of drain {drain.name}: {done} its run history.",
        tags={"dagster/kind/" + sink.kind: ""},
    )
    def _job() -> None:
        _maintain()

    return _job


def maintenance_schedule(drain: DrainConfig, job: dg.JobDefinition) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=f"{drain.name}_table_maintenance_daily",
        job=job,
        cron_schedule=MAINTENANCE_CRON,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
