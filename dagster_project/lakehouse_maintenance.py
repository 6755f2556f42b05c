"""Dagster job and schedule for a lakehouse drain's table maintenance (`drainer maintain`).

Compaction and expiry run daily, off the drain's own runs; each run records what it did as an
observation of the drain's asset, so the UI shows it beside the drain's materializations.
"""

import dagster as dg

from drainer.config import DrainConfig

MAINTENANCE_CRON = "0 3 * * *"  # daily, at an hour with few runs


def maintenance_job(drain: DrainConfig) -> dg.JobDefinition:
    @dg.op(name=f"{drain.name}_maintain_table")
    def _maintain(context: dg.OpExecutionContext) -> None:
        from spark_jobs.lakehouse_maintenance import maintain

        report = maintain(drain)
        context.log_event(
            dg.AssetObservation(
                asset_key=drain.name,
                metadata={f"maintenance_{key}": value for key, value in report.items()},
            )
        )

    @dg.job(
        name=f"{drain.name}_table_maintenance",
        description=f"Compacts {drain.name}'s {drain.sink.type} table and removes files and "
        "snapshots older than 7 days (`drainer maintain`).",
        tags={"dagster/kind/" + drain.sink.type: ""},
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
