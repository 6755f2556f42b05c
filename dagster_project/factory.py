"""`drain_definitions(drains_file)`: a drains file's Dagster definitions, for any code location.

Each drain becomes its own `dg.Definitions` (asset with checks, job, lag sensor, schedule) and
the drains are joined with `dg.Definitions.merge`, so a team's code location joins them with its
own definitions the same way:

    defs = dg.Definitions.merge(
        drain_definitions("drains.yaml"),
        dg.Definitions(assets=[their_asset]),
    )

The definitions bind one resource, `drainer` (DrainerResource), whose connection settings come
from the environment (`dg.EnvVar`). They set no executor: a drain's job runs its single step in
the run's own process (`in_process_executor` on the job), and the rest of the location keeps
whatever executor its owners chose.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from dagster_project.assets import drain_asset
from dagster_project.automation import drain_lag_sensor, drain_schedule
from dagster_project.freshness import drain_freshness
from dagster_project.maintenance_job import maintenance_job, maintenance_schedule
from dagster_project.resources import DrainerResource
from drainer.config import DrainConfig
from drainer.config.drains import selected_drains

RESOURCE_KEY = "drainer"


def definitions_for_drain(
    drain: DrainConfig, resource: DrainerResource, schedules: bool = True, sensors: bool = True
) -> dg.Definitions:
    """One drain's asset, checks, job `<drain>_job`, `<drain>_lag_sensor` and `<drain>_schedule`.

    `schedules=False` leaves out the drain's cron schedule and its daily maintenance schedule
    (the jobs stay, to launch by hand); `sensors=False` leaves out the lag sensor.
    """
    asset = drain_asset(drain, resource)
    policy = drain_freshness(drain)
    if policy is not None:  # max_wait: evaluated by Dagster's freshness daemon
        asset = asset.map_asset_specs(lambda spec: spec.replace_attributes(freshness_policy=policy))
    # a drain's run is one step: running it in the run's own process spares a second Python
    # process and a second import of the definitions (seconds per run)
    job = dg.define_asset_job(
        f"{drain.name}_job", selection=[asset], executor_def=dg.in_process_executor
    )
    # daily folds, history, and compaction of a table
    maintenance = maintenance_job(drain, resource)
    jobs: list[dg.JobDefinition | dg.UnresolvedAssetJobDefinition] = [job, maintenance]
    chosen: list[dg.ScheduleDefinition] = []
    if schedules:
        chosen = [drain_schedule(drain, job)] if drain.schedule else []
        chosen.append(maintenance_schedule(drain, maintenance))
    return dg.Definitions(
        assets=[asset],
        jobs=jobs,
        sensors=[drain_lag_sensor(drain, job)] if sensors else [],
        schedules=chosen,
        resources={RESOURCE_KEY: resource},
    )


def drain_definitions(
    drains_file: Path | str | None = None,
    resource: DrainerResource | None = None,
    select: list[str] | None = None,
    schedules: bool = True,
    sensors: bool = True,
) -> dg.Definitions:
    """Every drain of `drains_file` (default: the resource's, i.e. DRAINER_CONFIG, else
    ./drains.yaml) as definitions.

    `resource` replaces the default `DrainerResource.from_environment(drains_file)`, e.g. to
    name the services in code or to set `wait_seconds`. `select` keeps only the drains it
    names; `schedules` and `sensors` as in `definitions_for_drain`. Merge the result into a code
    location with `dg.Definitions.merge`; the resource key `drainer` must not be taken there by
    another resource. `drainer.dagster.DrainsComponent` calls this from a `defs.yaml`.
    """
    # one instance for every drain: Definitions.merge accepts a resource key bound twice only
    # to the same object
    resource = resource or DrainerResource.from_environment(drains_file)
    path = Path(drains_file) if drains_file is not None else resource.settings().config_path
    drains = selected_drains(path, select)
    return dg.Definitions.merge(
        dg.Definitions(resources={RESOURCE_KEY: resource}),
        *(
            definitions_for_drain(drain, resource, schedules=schedules, sensors=sensors)
            for drain in drains.values()
        ),
    )
