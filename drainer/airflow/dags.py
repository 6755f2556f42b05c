"""`drain_dags(drains_file)`: the drains file as Airflow DAGs, one per drain, plus upkeep.

The drains file is the one source, as a dbt project is Cosmos's: each drain becomes the DAG
`<drain>` (its cron `schedule:`, `max_active_runs=1`, catchup off, a `levels` param that manual
triggers and backfills pass, empty for all) with one `drain` task (DrainOperator) whose outlet
is the sink's table as an Asset (`sink_asset`), so downstream DAGs can be scheduled on the
table; and the DAG `<drain>_table_maintenance` (daily `drainer maintain`), as the Dagster code
location has them. A dags-folder file only calls it:

    from drainer.airflow import drain_dags
    dags = drain_dags("/path/to/drains.yaml")

Parsing reads the drains file and the environment only (no connection, no service): the DAG
processor parses often, and a drain run's own settings come from DrainerHook when it runs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, Param

from drainer.airflow.hook import DrainerHook, environment_settings
from drainer.airflow.operators import DrainOperator, MaintainOperator
from drainer.config import DrainConfig
from drainer.config.drains import selected_drains
from drainer.settings import Settings
from drainer.sinks import sink_for

MAINTENANCE_CRON = "0 3 * * *"  # daily, at an hour with few runs (as the Dagster schedule)
# the first interval a backfill may ask for; catchup is off, so no run is made for the past
START_DATE = datetime(2024, 1, 1, tzinfo=UTC)
DEFAULT_RETRIES = 2
DEFAULT_RETRY_DELAY = timedelta(minutes=1)


def sink_asset(drain: DrainConfig, settings: Settings) -> Asset:
    """The drain's sink table as an Airflow Asset (its URI from the sink: `Sink.uri`)."""
    sink = sink_for(drain.sink, settings)
    return Asset(uri=sink.uri(), extra={"drainer_sink": sink.describe()})


def levels_param(drain: DrainConfig) -> Param:
    return Param(
        [],
        type="array",
        items={"type": "integer", "minimum": 0, "maximum": drain.levels - 1},
        uniqueItems=True,
        title="levels",
        description=(
            f"Priority levels to drain in one run sharing the budget (0..{drain.levels - 1}, "
            f"{drain.levels - 1} most urgent); empty: all levels."
        ),
    )


def drain_dag(
    drain: DrainConfig,
    settings: Settings,
    drains_file: str,
    schedules: bool = True,
    default_args: dict[str, Any] | None = None,
    drainer_conn_id: str = DrainerHook.default_conn_name,
) -> DAG:
    """The DAG `<drain>`: one DrainOperator task whose outlet is the sink's Asset."""
    sink = sink_for(drain.sink, settings)
    args = {"retries": DEFAULT_RETRIES, "retry_delay": DEFAULT_RETRY_DELAY} | (default_args or {})
    with DAG(
        dag_id=drain.name,
        schedule=drain.schedule if schedules else None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        max_active_tasks=1,
        params={"levels": levels_param(drain)},
        default_args=args,
        tags=["drainer", sink.kind],
        description=(
            f"Drains Kafka topics {drain.topic}-0..{drain.levels - 1} by priority into "
            f"{sink.describe()}."
        ),
        doc_md=(
            f"One drainer run of **{drain.name}** per DAG run: the `levels` param (empty: all "
            f"{drain.levels}) share the budget of {drain.budget:,} records. The run summary is "
            "the `drain` task's XCom value; the sink table is its outlet asset."
        ),
    ) as dag:
        DrainOperator(
            task_id="drain",
            drain=drain.name,
            drains_file=drains_file,
            drainer_conn_id=drainer_conn_id,
            outlets=[sink_asset(drain, settings)],
        )
    return dag


def maintenance_dag(
    drain: DrainConfig,
    settings: Settings,
    drains_file: str,
    schedules: bool = True,
    default_args: dict[str, Any] | None = None,
    drainer_conn_id: str = DrainerHook.default_conn_name,
) -> DAG:
    """The DAG `<drain>_table_maintenance`: daily `drainer maintain`, off the drain's runs."""
    sink = sink_for(drain.sink, settings)
    what = (
        f"compacts {sink.describe()} and removes files and snapshots older than 7 days"
        if sink.capabilities.table_maintenance
        else f"folds the partitions of {sink.describe()}"
    )
    with DAG(
        dag_id=f"{drain.name}_table_maintenance",
        schedule=MAINTENANCE_CRON if schedules else None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=default_args or {},
        tags=["drainer", "maintenance", sink.kind],
        description=f"Daily `drainer maintain {drain.name}`: {what}, and prunes run history.",
    ) as dag:
        MaintainOperator(
            task_id="maintain",
            drain=drain.name,
            drains_file=drains_file,
            drainer_conn_id=drainer_conn_id,
        )
    return dag


def drain_dags(
    drains_file: Path | str | None = None,
    select: list[str] | None = None,
    schedules: bool = True,
    default_args: dict[str, Any] | None = None,
    drainer_conn_id: str = DrainerHook.default_conn_name,
) -> dict[str, DAG]:
    """Every drain of `drains_file` (default: DRAINER_CONFIG, else ./drains.yaml) as DAGs, by
    DAG id: `<drain>` and `<drain>_table_maintenance`.

    `select` keeps only the drains it names; `schedules=False` leaves every DAG unscheduled
    (trigger by hand); `default_args` go to every task (they override the drain tasks'
    retries=2, retry_delay=1 min); `drainer_conn_id` names the connection the runs use.
    """
    settings = environment_settings(drains_file)
    path = str(settings.config_path.expanduser().resolve())
    drains = selected_drains(path, select)
    dags: dict[str, DAG] = {}
    for drain in drains.values():
        for make in (drain_dag, maintenance_dag):
            dag = make(drain, settings, path, schedules, default_args, drainer_conn_id)
            dags[dag.dag_id] = dag
    return dags
