"""The demo: a backlog at three priority levels, drained by Dagster into Postgres and into Delta.

Brings the services up, creates the `events` topics, produces a fresh backlog at every level,
materializes the `events` asset for all levels through Dagster (the run is kept in
.dagster_home, so `make dagster` shows it) and prints what each level drained. Then the
`events_lake` drain reads the same topics into a Delta table, one typed row per record (its JSON
values decoded in Spark into columns, no processor), and the demo reads that table back without
Spark (deltalake) and checks it against what was drained.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from dagster_home import ensure_dagster_home
from rich.console import Console
from rich.table import Table

from drainer.settings import load_settings

if TYPE_CHECKING:
    import dagster as dg

    from drainer.config import DrainConfig

PRODUCE = {0: 30_000, 1: 20_000, 2: 10_000}  # records per level: 60,000 < the 70,000 budget
LAKE_DRAIN = "events_lake"  # drains.yaml: the same topics, into the Delta table events_lake
SHOWN_ROWS = 5
# the decoded value's fields (but its padding) and the metadata that names each record
SHOWN_COLUMNS = ("seq", "key", "_topic", "_partition", "_offset", "_level", "_key")

console = Console()


def main() -> int:
    from dagster_project.definitions import build_definitions
    from drainer import services
    from drainer.config import get_drain
    from drainer.kafka.producer import produce_records, synthetic_records
    from drainer.kafka.session import KafkaSession

    # the Connect server gets Delta's jars: drains.yaml uses it
    services.up(load_settings(), echo=console.print)
    settings = load_settings()  # read after `services up` made the local stack's secrets
    ensure_dagster_home()  # Dagster's storage is a database on the server just brought up
    from spark_jobs.drain_job import which_spark

    spark = which_spark(settings)  # the session the Dagster runs below use (in this process)
    console.print(f"Spark: [bold]{spark}[/]")
    drain = get_drain("events", settings.config_path)
    with KafkaSession(drain, settings) as kafka:
        kafka.create_topics()
        for level, count in PRODUCE.items():
            records = synthetic_records(count, keys=50, value_size=100, seed=level)
            produce_records(drain, records, level=level, kafka=kafka)
            console.print(
                f"produced {count:>7,} records at level {level} ({drain.level_topic(level)})"
            )

    defs = build_definitions()
    done = materialize(defs, drain)
    if done is None:
        return 1
    print_levels(*done)
    console.print(f"ran on {spark}")
    console.print("per-minute key counts are in Postgres table [bold]events_time_buckets[/]")

    lake = materialize(defs, get_drain(LAKE_DRAIN, settings.config_path))
    if lake is None or not read_back(lake[1]):
        return 1
    console.print("open the Dagster UI with [bold]make dagster[/]")
    return 0


def materialize(defs: dg.Definitions, drain: DrainConfig) -> tuple[str, dict[str, Any]] | None:
    """One Dagster run of the drain's asset over all levels: its Dagster run id and the run-wide
    metadata (`drain_run_id`, `run_drained`, `table_*`: the same on every level); None if it
    failed."""
    import dagster as dg

    from dagster_project.definitions import all_levels_tags

    console.print(
        f"materializing asset [bold]{drain.name}[/] for levels 0-{drain.levels - 1} "
        "in one Dagster run…"
    )
    result = dg.materialize(
        [defs.get_assets_def(drain.name)],
        resources={"drainer": defs.resources["drainer"]},
        instance=dg.DagsterInstance.get(),
        tags=all_levels_tags(drain),
        run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}},
    )
    if not result.success:
        console.print(f"[red]the Dagster run of {drain.name} failed[/]")
        return None
    metadata = result.asset_materializations_for_node(drain.name)[0].metadata
    return result.run_id, {key: value.value for key, value in metadata.items()}


def print_levels(dagster_run_id: str, metadata: dict[str, Any]) -> None:
    """What each level of the `events` run had reserved, planned and drained."""
    from drainer.lifecycle.run import load_level_reports
    from drainer.store import get_engine

    run_id = metadata["drain_run_id"]
    levels = load_level_reports(run_id, get_engine(load_settings().database_url))
    table = Table(title=f"drain run {run_id} (Dagster run {dagster_run_id[:8]})")
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


def read_back(metadata: dict[str, Any]) -> bool:
    """Read the Delta table the `events_lake` run committed to with deltalake (no Spark), print
    its version, rows and a few of them; False unless the run's commit holds what it drained."""
    from deltalake import DeltaTable

    run_id, drained = metadata["drain_run_id"], metadata["run_drained"]
    location, version = metadata["table_location"], metadata["table_version"]
    table = DeltaTable(location, version=version)  # as the run's commit left it
    rows = table.to_pyarrow_table()
    before = DeltaTable(location, version=version - 1).to_pyarrow_dataset() if version else None
    added = rows.num_rows - (before.count_rows() if before is not None else 0)
    commit = next(h for h in table.history() if h.get("version") == version)
    tagged = json.loads(commit.get("userMetadata") or "{}").get("drainer.run-id")
    ok = added == drained and tagged == run_id
    verdict = (
        f"[green]= {drained:,} drained[/]"
        if ok
        else f"[red]: expected run {run_id}'s commit with {drained:,} rows[/]"
    )
    console.print("the Delta table, read back without Spark (deltalake):")
    console.print(f"  [bold]{location}[/]")
    console.print(f"  version {version}: run {tagged}'s commit, {added:,} rows added {verdict}")
    console.print(f"  {rows.num_rows:,} rows in all")
    types = ", ".join(f"{f.name} {f.type}" for f in rows.schema if f.name in SHOWN_COLUMNS)
    console.print(f"  typed columns: {types}")
    urgent_first = [("_level", "descending"), ("_partition", "ascending"), ("_offset", "ascending")]
    shown = rows.sort_by(urgent_first)
    sample = Table(title=f"its first {SHOWN_ROWS} rows, most urgent level first")
    for column in SHOWN_COLUMNS:
        sample.add_column(column, justify="left" if column in ("_topic", "key") else "right")
    for row in shown.slice(0, SHOWN_ROWS).to_pylist():
        sample.add_row(*(str(row[c]) for c in SHOWN_COLUMNS))
    console.print(sample)
    return ok


if __name__ == "__main__":
    sys.exit(main())
