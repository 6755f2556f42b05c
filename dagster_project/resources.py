"""`DrainerResource`: where a Dagster deployment's drains connect, set in Dagster's resource config.

Each connection setting is a field of the resource, filled from the environment variable
drainer itself reads (`dg.EnvVar`, resolved when a run starts and never shown in the UI) when
that variable is set where the code location loads, and left empty otherwise (drainer's own
default then applies). A deployment can override any of them per run in the launchpad
(`resources: drainer: config: ...`) or per code location in code. The resource hands them to
drainer as the run's `Settings` (drainer.settings.settings_with), so the drain, its checks and
the Spark session it starts all see the same services; the process environment is never
touched, so two runs in one process with different settings cannot see each other's.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from drainer.config import DrainConfig
from drainer.config.kafka_clients import redacted_error
from drainer.lifecycle.run import RunResult
from drainer.observe import checks
from drainer.observe.checks import CheckResult
from drainer.settings import Settings, connection_variable, settings_with
from spark_jobs import drain_job

# resource field -> the variable drainer reads it from (docs/configuration.md)
ENV_VARIABLES = {
    "kafka_bootstrap_servers": "KAFKA_BOOTSTRAP_SERVERS",
    "database_url": "DRAINER_DATABASE_URL",
    "spark_remote": "SPARK_REMOTE",
    "spark_master": "SPARK_MASTER",
    "drains_file": "DRAINER_CONFIG",
}

# an hour: a drain's run takes minutes; a run that waits longer is stuck behind a stuck run
DEFAULT_WAIT_S = 3600.0


class DrainerResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # its own value
    """Runs drains and their checks against the services named here (empty: the environment's)."""

    kafka_bootstrap_servers: str | None = Field(
        default=None, description="Kafka brokers (KAFKA_BOOTSTRAP_SERVERS)."
    )
    database_url: str | None = Field(
        default=None,
        description="drainer's Postgres, a SQLAlchemy or libpq URL (DRAINER_DATABASE_URL).",
    )
    spark_remote: str | None = Field(
        default=None, description="Spark Connect endpoint sc://host:port (SPARK_REMOTE)."
    )
    spark_master: str | None = Field(
        default=None, description="Spark master for an in-process session (SPARK_MASTER)."
    )
    drains_file: str | None = Field(
        default=None, description="The drains YAML file the runs read (DRAINER_CONFIG)."
    )
    wait_seconds: float = Field(
        default=DEFAULT_WAIT_S,
        description=(
            "How long a run waits for another run of the same drain to finish before it fails "
            "with DrainBusy (runs of a backfill start together on an instance without a pool limit)."
        ),
    )

    @classmethod
    def from_environment(
        cls, drains_file: Path | str | None = None, **settings: Any
    ) -> "DrainerResource":
        """The resource whose connection fields are `dg.EnvVar`s of the variables that are set.

        A variable unset where the definitions load stays unset (None), so drainer's default
        applies instead of Dagster refusing the run over a missing variable. `settings` (field
        names, values or `dg.EnvVar`s) win over the environment's.
        """
        fields: dict[str, Any] = {}
        for field, name in ENV_VARIABLES.items():
            found = connection_variable(name)  # DRAINER_DATABASE_URL, else DATABASE_URL
            fields[field] = dg.EnvVar(found) if found else None
        if drains_file is not None:
            fields["drains_file"] = str(Path(drains_file).expanduser().resolve())
        return cls(**(fields | settings))

    def settings(self) -> Settings:
        """drainer's settings with this resource's fields over the environment's: in a run, the
        values Dagster resolved; while the definitions load (an asset's sink kind, the drains
        file), a field's `dg.EnvVar` is read from the environment there and then."""
        return settings_with(
            {name: _value(getattr(self, field)) for field, name in ENV_VARIABLES.items()}
        )

    @contextmanager
    def redacted_errors(self) -> Iterator[None]:
        """An error leaves for Dagster redacted: Dagster stores a step's error, its causes and
        their messages in its event log (and prints them to the compute logs) as they are."""
        try:
            yield
        except Exception as err:
            raise redacted_error(err).with_traceback(err.__traceback__) from None

    def run(
        self,
        drain: DrainConfig,
        levels: list[int],
        dagster_run_id: str,
        trigger: str,
        launch_key: str | None = None,
    ) -> RunResult:
        with self.redacted_errors():
            return drain_job.run(
                drain,
                settings=self.settings(),
                levels=levels,
                trigger=trigger,
                dagster_run_id=dagster_run_id,
                wait_s=self.wait_seconds,
                launch_key=launch_key,
            )

    def check(
        self, check: Callable[[DrainConfig, Settings], CheckResult], drain: DrainConfig
    ) -> CheckResult:
        return check(drain, self.settings())

    def backlog(self, drain: DrainConfig) -> int:
        """Records waiting over all the drain's levels (the lag sensor's tick stores errors)."""
        with self.redacted_errors():
            return sum(checks.total_backlog(drain, self.settings()).values())


def _value(field: str | None) -> str | None:
    """A field's value: a `dg.EnvVar` (unresolved outside a run) is its variable's value."""
    return field.get_value() if isinstance(field, dg.EnvVar) else field
