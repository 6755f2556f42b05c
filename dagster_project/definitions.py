"""One partitioned asset per configured drain, with its schedule, sensor, checks and pool.

Definitions only: a materialization is one call of `spark_jobs.drain_job.run`, the same call
the CLI and the tests make. Connections come from the environment (drainer.settings).
"""

import warnings

import dagster as dg

from drainer import checks
from drainer.config import DrainConfig, load_drains
from drainer.run import RunResult
from spark_jobs import drain_job

# single-run backfills are what make a backfill of levels share one budget; accept their beta tag
warnings.filterwarnings("ignore", category=dg.BetaWarning)

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


class DrainerResource(dg.ConfigurableResource):
    """Runs drains; `wait_seconds` is how long a run waits for another run of the same drain."""

    wait_seconds: float = 0.0

    def run(
        self, drain: DrainConfig, levels: list[int], dagster_run_id: str, trigger: str
    ) -> RunResult:
        return drain_job.run(
            drain,
            levels=levels,
            trigger=trigger,
            dagster_run_id=dagster_run_id,
            wait_s=self.wait_seconds,
        )


def run_metadata(result: RunResult) -> dict[str, dg.MetadataValue]:
    """Flat numeric metadata so the UI plots every level's numbers run over run."""
    metadata: dict[str, dg.MetadataValue] = {
        "drain_run_id": dg.MetadataValue.int(result.run_id),
        "drained": dg.MetadataValue.int(result.drained),
        "duration_s": dg.MetadataValue.float(round(result.duration_s, 3)),
        "records_per_s": dg.MetadataValue.float(
            round(result.drained / result.duration_s, 1) if result.duration_s else 0.0
        ),
        "sink_rows": dg.MetadataValue.int(result.published_rows),
        "resumed": dg.MetadataValue.bool(result.resumed),
        "mirror_maps_dropped": dg.MetadataValue.int(result.mirror.maps_dropped),
    }
    for lv in result.levels:
        for name in (
            "reserved",
            "burst",
            "allocated",
            "planned",
            "drained",
            "failed",
            "dead_lettered",
            "backlog_before",
            "backlog_after",
        ):
            metadata[f"level_{lv.level}_{name}"] = dg.MetadataValue.int(int(getattr(lv, name)))
        metadata[f"level_{lv.level}_fill_ratio"] = dg.MetadataValue.float(round(lv.fill_ratio, 4))
    return metadata


def _trigger(context: dg.AssetExecutionContext) -> str:
    tags = context.run.tags
    if "dagster/schedule_name" in tags:
        return "schedule"
    if "dagster/sensor_name" in tags:
        return "sensor"
    if "dagster/backfill" in tags:
        return "backfill"
    return "dagster"


def drain_asset(drain: DrainConfig) -> dg.AssetsDefinition:
    @dg.asset(
        name=drain.name,
        group_name="drains",
        partitions_def=dg.StaticPartitionsDefinition([str(level) for level in range(drain.levels)]),
        # a backfill of selected levels is one run sharing the budget among those levels only
        backfill_policy=dg.BackfillPolicy.single_run(),
        pool=f"drain_{drain.name}",
        kinds={"kafka", "spark", "postgres"},
        description=(
            f"Drains Kafka topics {drain.topic}-0..{drain.levels - 1} by priority into Postgres "
            f"table {drain.sink.table}; each partition is a priority level ({drain.levels - 1} most urgent)."
        ),
    )
    def _drain(context: dg.AssetExecutionContext, drainer: DrainerResource) -> dg.MaterializeResult:
        levels = sorted(int(key) for key in context.partition_keys)
        result = drainer.run(drain, levels, context.run.run_id, _trigger(context))
        context.log.info(
            "drain run %s: %s records (levels %s)", result.run_id, result.drained, levels
        )
        return dg.MaterializeResult(metadata=run_metadata(result))

    return _drain


def all_levels_tags(drain: DrainConfig) -> dict[str, str]:
    """Run tags that make one run cover every level (a partition range 0..N-1)."""
    return {RANGE_START: "0", RANGE_END: str(drain.levels - 1)}


def drain_schedule(drain: DrainConfig, job) -> dg.ScheduleDefinition:
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


def drain_lag_sensor(drain: DrainConfig, job) -> dg.SensorDefinition:
    threshold = drain.lag_threshold or drain.budget

    @dg.sensor(
        name=f"{drain.name}_lag_sensor",
        job=job,
        minimum_interval_seconds=60,
        description=f"Requests a run of {drain.name} when its backlog reaches {threshold:,} records.",
    )
    def _sensor(context: dg.SensorEvaluationContext):
        backlog = sum(checks.total_backlog(drain).values())
        if backlog < threshold:
            return dg.SkipReason(f"backlog {backlog:,} < {threshold:,}")
        in_flight = context.instance.get_run_records(
            dg.RunsFilter(job_name=job.name, statuses=IN_FLIGHT), limit=1
        )
        if in_flight:
            return dg.SkipReason(f"backlog {backlog:,}, but a run of {job.name} is in flight")
        return dg.RunRequest(tags=all_levels_tags(drain))

    return _sensor


def drain_check(drain: DrainConfig, check) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=drain.name, name=check.__name__, blocking=False, description=check.__doc__
    )
    def _check() -> dg.AssetCheckResult:
        result = check(drain)
        return dg.AssetCheckResult(
            passed=result.passed,
            severity=dg.AssetCheckSeverity.WARN,
            description=result.description,
            metadata=result.numbers,
        )

    return _check


CHECKS = (checks.lag_within_sla, checks.dead_letters_not_growing, checks.offsets_never_backwards)


def build_definitions() -> dg.Definitions:
    drains = load_drains()
    assets, asset_checks, jobs, schedules, sensors = [], [], [], [], []
    for drain in drains.values():
        asset = drain_asset(drain)
        job = dg.define_asset_job(f"{drain.name}_job", selection=[asset])
        assets.append(asset)
        asset_checks.extend(drain_check(drain, check) for check in CHECKS)
        jobs.append(job)
        sensors.append(drain_lag_sensor(drain, job))
        if drain.schedule:
            schedules.append(drain_schedule(drain, job))
    return dg.Definitions(
        assets=assets,
        asset_checks=asset_checks,
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources={"drainer": DrainerResource()},
    )


defs = build_definitions()
