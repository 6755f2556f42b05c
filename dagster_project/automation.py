"""What launches a drain's runs: its cron schedule and its lag sensor, each one all-levels run."""

from typing import TYPE_CHECKING

import dagster as dg

from dagster_project.resources import DrainerResource
from drainer.config import DrainConfig

if TYPE_CHECKING:  # what define_asset_job returns; dagster exports no public name for it
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def all_levels_tags(drain: DrainConfig) -> dict[str, str]:
    """Run tags that make one run cover every level (a partition range 0..N-1)."""
    return {RANGE_START: "0", RANGE_END: str(drain.levels - 1)}


def drain_schedule(
    drain: DrainConfig, job: "UnresolvedAssetJobDefinition"
) -> dg.ScheduleDefinition:
    if not drain.schedule:
        raise ValueError(f"drain {drain.name} has no `schedule:` in the drains file: no schedule")

    @dg.schedule(
        name=f"{drain.name}_schedule",
        cron_schedule=drain.schedule,
        job=job,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"One run of drain {drain.name} over all {drain.levels} levels.",
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        return dg.RunRequest(tags=all_levels_tags(drain))

    return _schedule


def drain_lag_sensor(
    drain: DrainConfig, job: "UnresolvedAssetJobDefinition"
) -> dg.SensorDefinition:
    threshold = drain.lag_threshold or drain.budget

    @dg.sensor(
        name=f"{drain.name}_lag_sensor",
        job=job,
        minimum_interval_seconds=60,
        description=f"Requests a run of {drain.name} when its backlog reaches {threshold:,} records.",
    )
    def _sensor(
        context: dg.SensorEvaluationContext, drainer: DrainerResource
    ) -> dg.RunRequest | dg.SkipReason:
        backlog = drainer.backlog(drain)
        if backlog < threshold:
            return dg.SkipReason(f"backlog {backlog:,} < {threshold:,}")
        in_flight = run_in_flight(context.instance, drain, job.name)
        if in_flight is not None:
            return dg.SkipReason(
                f"backlog {backlog:,}, but run {in_flight.run_id} of {drain.name} "
                f"({in_flight.job_name}) is in flight"
            )
        return dg.RunRequest(tags=all_levels_tags(drain))

    return _sensor


def run_in_flight(
    instance: dg.DagsterInstance, drain: DrainConfig, job_name: str
) -> dg.DagsterRun | None:
    """A queued or running run that materializes the drain's asset, whatever job launched it.

    The drain's own job; the UI's *Materialize* and backfills (the implicit asset job, with an
    asset selection); or any other job whose plan has the asset's step.
    """
    key = dg.AssetKey(drain.name)
    for record in instance.get_run_records(dg.RunsFilter(statuses=IN_FLIGHT), limit=200):
        run = record.dagster_run
        if run.job_name == job_name:
            return run
        if run.asset_selection is not None:
            if key in run.asset_selection:
                return run
            continue
        plan = (
            instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
            if run.execution_plan_snapshot_id
            else None
        )
        if plan is not None and drain.name in plan.step_keys_to_execute:
            return run
    return None
