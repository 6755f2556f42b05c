"""`DrainsComponent`: a drains file's Dagster definitions as a `dg` component (defs.yaml).

The one Dagster module inside `drainer/`: it is the name a `dg` project types
(`type: drainer.dagster.DrainsComponent`) and the registry module the
`dagster_dg_cli.registry_modules` entry point names, so `dg list components` lists it. It only
maps YAML attributes onto `dagster_project.factory.drain_definitions`, the same factory a
Python code location merges: one implementation of what a drain becomes. Nothing else in
`drainer/` imports it (tests/unit/test_layering.py), so the CLI never loads Dagster.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import BaseModel, Field

from dagster_project.factory import drain_definitions
from dagster_project.resources import DEFAULT_WAIT_S, DrainerResource

__all__ = ["DrainsComponent"]

# the drains file a scaffolded component starts with, beside its defs.yaml
STARTER_DRAINS = """\
# drainer's drains (drainer's docs/configuration.md): a drain reads the Kafka topics
# <topic>-0 .. <topic>-(levels-1), the highest level the most urgent, into one sink
drains:
  events:
    topic: events
    group: analytics         # consumer groups analytics-0 .. analytics-2 mirror progress
    levels: 3
    budget: 10000            # records per run, shared by the levels
    schedule: "*/5 * * * *"
    max_wait: 1h             # Dagster's freshness policy fails after an hour without a run
    sink:
      type: postgres
      table: events_sink
"""


class FromEnv(dg.Model):
    """A setting read from an environment variable when a run starts (never shown in the UI)."""

    env: str = Field(description="The environment variable's name.")


class ResourceSettings(dg.Model):
    """The `drainer` resource's settings; an unset one comes from drainer's own variable."""

    kafka_bootstrap_servers: str | FromEnv | None = Field(
        default=None, description="Kafka brokers (else KAFKA_BOOTSTRAP_SERVERS)."
    )
    database_url: str | FromEnv | None = Field(
        default=None,
        description="drainer's Postgres URL (else DRAINER_DATABASE_URL); give a password as "
        "`{env: NAME}`, not in the file.",
    )
    spark_remote: str | FromEnv | None = Field(
        default=None, description="Spark Connect endpoint sc://host:port (else SPARK_REMOTE)."
    )
    spark_master: str | FromEnv | None = Field(
        default=None, description="Spark master for an in-process session (else SPARK_MASTER)."
    )
    wait_seconds: float = Field(
        default=DEFAULT_WAIT_S,
        description="How long a run waits for another run of the same drain to finish.",
    )


class DrainsComponentScaffoldParams(BaseModel):
    drains_file: str | None = Field(
        default=None,
        description="An existing drains file (relative to the new folder, or absolute); "
        "without it a starter drains.yaml is written beside defs.yaml.",
    )


class DrainsComponentScaffolder(dg.Scaffolder[DrainsComponentScaffoldParams]):
    """Writes a defs.yaml that loads as it is: it names a drains file that exists."""

    @classmethod
    def get_scaffold_params(cls) -> type[DrainsComponentScaffoldParams]:
        return DrainsComponentScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[DrainsComponentScaffoldParams]) -> None:
        drains_file = request.params.drains_file
        if drains_file is None:
            drains_file = "drains.yaml"
            starter = Path(request.target_path) / drains_file
            if not starter.exists():
                starter.write_text(STARTER_DRAINS)
        dg.scaffold_component(request, {"drains_file": drains_file})


@dg.scaffold_with(DrainsComponentScaffolder)
class DrainsComponent(dg.Component, dg.Model, dg.Resolvable):
    """Every drain of a drains file: an asset partitioned by level, with checks, job, schedules
    and lag sensor.

    The same definitions as `dagster_project.drain_definitions` (drainer's docs/dagster.md).
    """

    drains_file: str | None = Field(
        default=None,
        description="The drains YAML file, relative to this defs.yaml's folder or absolute; "
        "default: DRAINER_CONFIG, else ./drains.yaml. The runs read the same file.",
    )
    drains: list[str] | None = Field(
        default=None, description="Only these drains of the file (default: all of them)."
    )
    resource: ResourceSettings | None = Field(
        default=None,
        description="Settings of the `drainer` resource (default: drainer's environment).",
    )
    schedules: bool = Field(
        default=True,
        description="Each drain's cron schedule (when it has `schedule:`) and daily "
        "maintenance schedule; false keeps the jobs only.",
    )
    sensors: bool = Field(
        default=True, description="Each drain's lag sensor (defined stopped; start it in the UI)."
    )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        path = None if self.drains_file is None else context.path / Path(self.drains_file)
        return drain_definitions(
            path,
            resource=self._resource(path),
            select=self.drains,
            schedules=self.schedules,
            sensors=self.sensors,
        )

    def _resource(self, path: Path | None) -> DrainerResource | None:
        """The resource with this component's settings over the environment's (None: defaults)."""
        if self.resource is None:
            return None
        given: dict[str, str | float | dg.EnvVar] = {"wait_seconds": self.resource.wait_seconds}
        for field, value in self.resource:
            if isinstance(value, FromEnv):
                given[field] = dg.EnvVar(value.env)
            elif isinstance(value, str):
                given[field] = value
        return DrainerResource.from_environment(path, **given)
