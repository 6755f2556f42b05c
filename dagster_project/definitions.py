"""One partitioned asset per configured drain, with its schedule, sensor, checks and pool.

Definitions only: a materialization is one call of `spark_jobs.drain_job.run`, the same call
the CLI and the tests make. Connections come from the environment (drainer.settings). Which
levels a run drains (a backfill of any levels is one drainer run): dagster_project.launches;
what each partition's materialization carries: dagster_project.metadata.
"""

import time
import warnings

import dagster as dg

from dagster_project.lakehouse_maintenance import maintenance_job, maintenance_schedule
from dagster_project.launches import launch_levels
from dagster_project.logs import drainer_logs_to
from dagster_project.metadata import level_metadata, run_metadata, run_tags
from drainer.config import DrainConfig, load_drains
from drainer.lifecycle.run import RunResult
from drainer.observe import checks
from drainer.services.lakehouse import table_label
from drainer.settings import load_settings
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
        self,
        drain: DrainConfig,
        levels: list[int],
        dagster_run_id: str,
        trigger: str,
        launch_key: str | None = None,
    ) -> RunResult:
        return drain_job.run(
            drain,
            levels=levels,
            trigger=trigger,
            dagster_run_id=dagster_run_id,
            wait_s=self.wait_seconds,
            launch_key=launch_key,
        )


def _trigger(context: dg.AssetExecutionContext) -> str:
    tags = context.run.tags
    if "dagster/schedule_name" in tags:
        return "schedule"
    if "dagster/sensor_name" in tags:
        return "sensor"
    if "dagster/backfill" in tags:
        return "backfill"
    return "dagster"


CHECKS = (checks.lag_within_sla, checks.dead_letters_not_growing, checks.offsets_never_backwards)


def drain_asset(drain: DrainConfig) -> dg.AssetsDefinition:
    @dg.asset(
        name=drain.name,
        group_name="drains",
        partitions_def=dg.StaticPartitionsDefinition([str(level) for level in range(drain.levels)]),
        # one run per contiguous range of selected levels; launches.py makes any selection one
        # drainer run sharing the budget
        backfill_policy=dg.BackfillPolicy.single_run(),
        pool=f"drain_{drain.name}",
        kinds={"kafka", "spark", drain.sink.type},
        # the checks run in the drain's own step (no process of their own): well under a second
        check_specs=[
            dg.AssetCheckSpec(check.__name__, asset=drain.name, description=check.__doc__)
            for check in CHECKS
        ],
        description=(
            f"Drains Kafka topics {drain.topic}-0..{drain.levels - 1} by priority into "
            f"{sink_label(drain)}; each partition is a priority level ({drain.levels - 1} most "
            "urgent)."
        ),
    )
    def _drain(context: dg.AssetExecutionContext, drainer: DrainerResource) -> dg.MaterializeResult:
        levels, launch_key = launch_levels(context)
        with drainer_logs_to(context.log):
            result = drainer.lifecycle.run(
                drain, levels, context.run.run_id, _trigger(context), launch_key
            )
        context.instance.add_run_tags(context.run.run_id, run_tags(result))
        own = {int(key) for key in context.partition_keys}
        for lv in result.levels:
            if lv.level in own:  # only the requested partitions, each with its own numbers
                context.add_asset_metadata(level_metadata(lv), partition_key=str(lv.level))
        context.log.info(
            "drain run %s%s: %s records (levels %s); this run materializes levels %s",
            result.run_id,
            " (drained by an earlier run of this backfill)" if result.shared else "",
            result.drained,
            [lv.level for lv in result.levels],
            sorted(own),
        )
        started = time.monotonic()
        check_results = run_checks(drain)
        metadata = run_metadata(result)
        metadata["checks_s"] = dg.MetadataValue.float(round(time.monotonic() - started, 3))
        return dg.MaterializeResult(metadata=metadata, check_results=check_results)

    return _drain


def sink_label(drain: DrainConfig) -> str:
    """The drain's sink in words, for the asset's description."""
    sink = drain.sink
    if sink.type == "postgres":
        return f"Postgres table {sink.table}"
    kind = "Delta table" if sink.type == "delta" else "Iceberg table"
    return f"{kind} {table_label(load_settings(), sink)}"


def run_checks(drain: DrainConfig) -> list[dg.AssetCheckResult]:
    results = []
    for check in CHECKS:
        outcome = check(drain)
        results.append(
            dg.AssetCheckResult(
                check_name=check.__name__,
                passed=outcome.passed,
                severity=dg.AssetCheckSeverity.WARN,
                description=outcome.description,
                metadata=outcome.numbers,
            )
        )
    return results


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


def build_definitions() -> dg.Definitions:
    drains = load_drains()
    assets, jobs, schedules, sensors = [], [], [], []
    for drain in drains.values():
        asset = drain_asset(drain)
        job = dg.define_asset_job(f"{drain.name}_job", selection=[asset])
        assets.append(asset)
        jobs.append(job)
        sensors.append(drain_lag_sensor(drain, job))
        if drain.schedule:
            schedules.append(drain_schedule(drain, job))
        if drain.sink.lakehouse:
            maintenance = maintenance_job(drain)
            jobs.append(maintenance)
            schedules.append(maintenance_schedule(drain, maintenance))
    return dg.Definitions(
        assets=assets,
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources={"drainer": DrainerResource()},
        # a drain's run is one step: running it in the run's own process spares a second
        # Python process and a second import of these definitions (seconds per run)
        executor=dg.in_process_executor,
    )


defs = build_definitions()
