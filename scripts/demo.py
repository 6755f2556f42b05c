"""The demo: a backlog at three priority levels, drained by one Dagster run into Postgres.

Brings the services up, creates the `events` topics, produces a fresh backlog at every level,
materializes the `events` asset for all levels through Dagster (the run is kept in
.dagster_home, so `make dagster` shows it), and prints what each level drained.
"""

from __future__ import annotations

import sys

from dagster_home import ensure_dagster_home
from rich.console import Console
from rich.table import Table

PRODUCE = {0: 30_000, 1: 20_000, 2: 10_000}  # records per level: 60,000 < the 70,000 budget

console = Console()


def main() -> int:
    import dagster as dg

    from dagster_project.definitions import all_levels_tags, build_definitions
    from drainer import services
    from drainer.config import get_drain
    from drainer.kafka.producer import produce_records, synthetic_records
    from drainer.kafka.session import KafkaSession
    from drainer.lifecycle.run import load_level_reports

    services.up(echo=console.print)
    ensure_dagster_home()  # Dagster's storage is a database on the server just brought up
    from spark_jobs.drain_job import which_spark

    spark = which_spark()  # the session the Dagster run below uses (in this process)
    console.print(f"Spark: [bold]{spark}[/]")
    drain = get_drain("events")
    with KafkaSession(drain) as kafka:
        kafka.create_topics()
    for level, count in PRODUCE.items():
        produce_records(
            drain, synthetic_records(count, keys=50, value_size=100, seed=level), level=level
        )
        console.print(f"produced {count:>7,} records at level {level} ({drain.level_topic(level)})")

    defs = build_definitions()
    console.print("materializing asset [bold]events[/] for levels 0-2 in one Dagster run…")
    result = dg.materialize(
        [defs.get_assets_def("events")],
        resources={"drainer": defs.resources["drainer"]},
        instance=dg.DagsterInstance.get(),
        tags=all_levels_tags(drain),
        run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}},
    )
    if not result.success:
        console.print("[red]the Dagster run failed[/]")
        return 1
    materialization = result.asset_materializations_for_node("events")[0]
    run_id = materialization.metadata["drain_run_id"].value
    levels = load_level_reports(run_id)

    table = Table(title=f"drain run {run_id} (Dagster run {result.run_id[:8]})")
    for column in ("level", "produced now", "reserved", "planned", "drained", "backlog after"):
        table.add_column(column, justify="right")
    for lv in levels:
        table.add_row(
            str(lv.level),
            f"{PRODUCE[lv.level]:,}",
            f"{lv.reserved:,}",
            f"{lv.planned:,}",
            f"{lv.drained:,}",
            f"{lv.backlog_after:,}",
        )
    drained = sum(lv.drained for lv in levels)
    table.add_row("total", f"{sum(PRODUCE.values()):,}", "", "", f"{drained:,}", "", style="bold")
    console.print(table)
    console.print(f"ran on {spark}")
    console.print(
        "per-minute key counts are in Postgres table [bold]events_time_buckets[/]; "
        "open the Dagster UI with [bold]make dagster[/]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
