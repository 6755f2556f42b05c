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
from dagster_project.maintenance import maintenance_job, maintenance_schedule
from dagster_project.resources import DrainerResource
from drainer.config import DrainConfig, load_drains
from drainer.settings import load_settings

RESOURCE_KEY = "drainer"


def definitions_for_drain(drain: DrainConfig, resource: DrainerResource) -> dg.Definitions:
    """One drain's asset, checks, job `<drain>_job`, `<drain>_lag_sensor` and `<drain>_schedule`."""
    asset = drain_asset(drain)
    # a drain's run is one step: running it in the run's own process spares a second Python
    # process and a second import of the definitions (seconds per run)
    job = dg.define_asset_job(
        f"{drain.name}_job", selection=[asset], executor_def=dg.in_process_executor
    )
    jobs: list[dg.JobDefinition | dg.UnresolvedAssetJobDefinition] = [job]
    schedules = [drain_schedule(drain, job)] if drain.schedule else []
    maintenance = maintenance_job(drain)  # daily folds, history, and compaction of a table
    jobs.append(maintenance)
    schedules.append(maintenance_schedule(drain, maintenance))
    return dg.Definitions(
        assets=[asset],
        jobs=jobs,
        sensors=[drain_lag_sensor(drain, job)],
        schedules=schedules,
        resources={RESOURCE_KEY: resource},
    )


def drain_definitions(
    drains_file: Path | str | None = None, resource: DrainerResource | None = None
) -> dg.Definitions:
    """Every drain of `drains_file` (default: DRAINER_CONFIG, else ./drains.yaml) as definitions.

    `resource` replaces the default `DrainerResource.from_environment(drains_file)`, e.g. to
    name the services in code or to set `wait_seconds`. Merge the result into a code location
    with `dg.Definitions.merge`; the resource key `drainer` must not be taken there by another
    resource.
    """
    path = Path(drains_file) if drains_file is not None else load_settings().config_path
    drains = load_drains(path)
    # one instance for every drain: Definitions.merge accepts a resource key bound twice only
    # to the same object
    resource = resource or DrainerResource.from_environment(drains_file)
    return dg.Definitions.merge(
        dg.Definitions(resources={RESOURCE_KEY: resource}),
        *(definitions_for_drain(drain, resource) for drain in drains.values()),
    )
