"""A drain's asset: partitioned by priority level, one drainer run per Dagster run, with checks.

A materialization is one call of `spark_jobs.drain_job.run` (through DrainerResource), the same
call the CLI and the tests make. Which levels a run drains: dagster_project.launches; what each
partition's materialization carries: dagster_project.metadata.
"""

import time
import warnings

import dagster as dg

from dagster_project import health_checks as level_health
from dagster_project.launches import launch_levels
from dagster_project.logs import drainer_logs_to
from dagster_project.metadata import level_metadata, run_metadata, run_tags
from dagster_project.resources import DrainerResource
from drainer.config import DrainConfig
from drainer.config.kafka_clients import redact
from drainer.observe import checks
from drainer.observe.health_rules import LevelHealth
from drainer.sinks import sink_for

CHECKS = (checks.lag_within_sla, checks.dead_letters_not_growing, checks.offsets_never_backwards)


def _trigger(context: dg.AssetExecutionContext) -> str:
    tags = context.run.tags
    if "dagster/schedule_name" in tags:
        return "schedule"
    if "dagster/sensor_name" in tags:
        return "sensor"
    if "dagster/backfill" in tags:
        return "backfill"
    return "dagster"


def drain_asset(drain: DrainConfig, resource: DrainerResource) -> dg.AssetsDefinition:
    """The drain's asset; `resource` (the one the definitions bind) says where its sink is."""
    # single-run backfills are what make a backfill of levels share one budget: accept their
    # beta tag here, without touching the warning filters of the code location around us
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return _drain_asset(drain, resource)


def _drain_asset(drain: DrainConfig, resource: DrainerResource) -> dg.AssetsDefinition:
    sink = sink_for(drain.sink, resource.settings())

    @dg.asset(
        name=drain.name,
        group_name="drains",
        partitions_def=dg.StaticPartitionsDefinition([str(level) for level in range(drain.levels)]),
        # one run per contiguous range of selected levels; launches.py makes any selection one
        # drainer run sharing the budget
        backfill_policy=dg.BackfillPolicy.single_run(),
        pool=f"drain_{drain.name}",
        kinds={"kafka", "spark", sink.kind},
        # the checks run in the drain's own step (no process of their own): well under a second
        check_specs=[
            dg.AssetCheckSpec(check.__name__, asset=drain.name, description=check.__doc__)
            for check in CHECKS
        ]
        + [level_health.level_health_spec(drain)],
        description=(
            f"Drains Kafka topics {drain.topic}-0..{drain.levels - 1} by priority into "
            f"{sink.describe()}; each partition is a priority level ({drain.levels - 1} most "
            "urgent)."
        ),
    )
    def _drain(context: dg.AssetExecutionContext, drainer: DrainerResource) -> dg.MaterializeResult:  # type: ignore[type-arg]  # no output value
        levels, launch_key = launch_levels(context)
        with drainer_logs_to(context.log):
            result = drainer.run(drain, levels, context.run.run_id, _trigger(context), launch_key)
        context.instance.add_run_tags(context.run.run_id, run_tags(result))
        own = {int(key) for key in context.partition_keys}
        healths, health_error = _levels_health(drainer, drain)
        for lv in result.levels:
            if lv.level in own:  # only the requested partitions, each with its own numbers
                numbers = level_metadata(lv)
                if healths is not None:
                    numbers |= level_health.health_metadata(healths[lv.level])
                context.add_asset_metadata(numbers, partition_key=str(lv.level))
        context.log.info(
            "drain run %s%s: %s records (levels %s); this run materializes levels %s",
            result.run_id,
            " (drained by an earlier run of this backfill)" if result.shared else "",
            result.drained,
            [lv.level for lv in result.levels],
            sorted(own),
        )
        started = time.monotonic()
        check_results = run_checks(drainer, drain)
        check_results.append(
            level_health.health_check(healths)
            if healths is not None
            else _unevaluated(level_health.CHECK_NAME, health_error)
        )
        metadata = run_metadata(result)
        metadata["checks_s"] = dg.MetadataValue.float(round(time.monotonic() - started, 3))
        return dg.MaterializeResult(metadata=metadata, check_results=check_results)

    return _drain


def run_checks(drainer: DrainerResource, drain: DrainConfig) -> list[dg.AssetCheckResult]:
    """Every check's result; one that cannot be evaluated fails as a check, not as the run.

    The checks run after the commit: the drain succeeded whatever they find, and a run marked
    failed would invite a retry of a drain that is already done.
    """
    results = []
    for check in CHECKS:
        try:
            outcome = drainer.check(check, drain)
        except Exception as err:
            results.append(_unevaluated(check.__name__, err))
            continue
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


def _levels_health(
    drainer: DrainerResource, drain: DrainConfig
) -> tuple[dict[int, LevelHealth] | None, Exception | None]:
    """Each level's health after the run, or why it could not be read (never fails the run)."""
    try:
        return level_health.levels_health(drain, drainer.settings()), None
    except Exception as err:
        return None, err


def _unevaluated(name: str, err: Exception | None) -> dg.AssetCheckResult:
    """A check that could not be evaluated fails as a check, not as the committed run."""
    return dg.AssetCheckResult(
        check_name=name,
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR,
        description=redact(
            f"the check could not be evaluated ({type(err).__name__}: {err}); the drain "
            "itself committed, and the next run evaluates it again"
        ),
    )
