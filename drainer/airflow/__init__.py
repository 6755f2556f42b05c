"""drainer's Airflow provider: the drains file as Airflow DAGs (docs/airflow.md).

Like Cosmos renders a dbt project, `drain_dags(drains_file)` renders each drain as a DAG whose
one `DrainOperator` task calls the run path the CLI and Dagster call
(`spark_jobs.drain_job.run` → `drainer.lifecycle.run.drain_once`): same lease, same plans,
exactly once whoever launches. `DrainerHook` builds the run's settings from an Airflow
connection of type `drainer` and the environment.

This module imports no Airflow: Airflow calls `get_provider_info` (the
`apache_airflow_provider` entry point) while it loads its own configuration. The other names
load on first use. Nothing else in `drainer/` imports this package (tests/unit/test_layering.py).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["DrainOperator", "DrainerHook", "MaintainOperator", "drain_dags", "get_provider_info"]

_FROM = {
    "DrainOperator": "operators",
    "MaintainOperator": "operators",
    "DrainerHook": "hook",
    "drain_dags": "dags",
}


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager reads: the `drainer` connection type and its hook."""
    from drainer import __version__

    return {
        "package-name": "drainer",
        "name": "drainer",
        "description": "Priority backlog drains of Kafka topics, exactly once, as Airflow DAGs.",
        "versions": [__version__],
        "connection-types": [
            {"connection-type": "drainer", "hook-class-name": "drainer.airflow.hook.DrainerHook"}
        ],
        "operators": [
            {"integration-name": "drainer", "python-modules": ["drainer.airflow.operators"]}
        ],
        "hooks": [{"integration-name": "drainer", "python-modules": ["drainer.airflow.hook"]}],
    }


def __getattr__(name: str) -> Any:
    if name in _FROM:
        return getattr(import_module(f"drainer.airflow.{_FROM[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
