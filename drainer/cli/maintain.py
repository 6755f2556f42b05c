"""`drainer maintain <drain>`: the upkeep every run does after its commit, done to the end now.

Folds a Postgres sink's partitions until the target is as small as it gets, prunes run detail
older than `history_days` to daily totals, and for a Delta or Iceberg sink compacts small files
(Delta OPTIMIZE, Iceberg rewrite_data_files) and removes files and snapshots older than the
retention (Delta VACUUM, Iceberg expire_snapshots). The table work runs on Spark, injected like
`drainer run`'s executor: this package imports no pyspark.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from drainer.cli.args import Subcommands, add_command, get_drain
from drainer.cli.output import console, print_table
from drainer.errors import ConfigError

if TYPE_CHECKING:
    from drainer.config import DrainConfig

DEFAULT_RETENTION_HOURS = 7 * 24


def register(sub: Subcommands) -> None:
    p = add_command(
        sub,
        "maintain",
        cmd_maintain,
        "keep the drain bounded now: fold a Postgres sink's partitions, prune old run detail, "
        "compact and expire a Delta or Iceberg table",
    )
    p.add_argument("drain")
    p.add_argument(
        "--retention-hours",
        type=float,
        default=DEFAULT_RETENTION_HOURS,
        help="lakehouse tables: keep what readers of this many past hours need (default 168)",
    )
    p.add_argument("--force", action="store_true", help="allow a retention below 7 days")
    p.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS", help="wait for a running run"
    )
    p.add_argument("--json", action="store_true")


def cmd_maintain(args: argparse.Namespace) -> int:
    from drainer.lifecycle.upkeep import maintain_drain
    from drainer.sinks import sink_for

    settings = args.settings
    drain = get_drain(args.drain, args.settings)
    table_job = None
    if sink_for(drain.sink, settings).capabilities.table_maintenance:
        if args.maintainer is None:
            raise ConfigError("table maintenance needs Spark: run it through the `drainer` command")
        job = args.maintainer()

        def table_job(d: DrainConfig, keep_hours: float | None) -> dict[str, Any]:
            done: dict[str, Any] = job(
                d, args.retention_hours, args.force, settings=settings, keep_hours=keep_hours
            )
            return done

    report = maintain_drain(drain, wait_s=args.wait, table=table_job, settings=settings)
    table = report.table
    if args.json:
        print(json.dumps(asdict(report), indent=2, default=str))
        return 0
    sink, history = report.sink, report.history
    print_table(
        f"upkeep of {report.drain}",
        ["what", "done"],
        [
            [
                f"partitions of {sink.table}",
                f"{sink.before:,} -> {sink.after:,} ({sink.folds} folds)",
            ],
            ["runs pruned to daily totals", history.runs],
            ["dead letters pruned (published or retried)", history.dead_letters],
            ["attempt counts pruned (records done)", history.attempts],
        ],
        justify="left",
    )
    if table is not None:
        console.print(
            f"{drain.name}: {table['format']} table {table['location']}: "
            f"{table['files_removed']} files compacted into {table['files_added']}; "
            f"nothing a reader of the last {table['retention_hours']:g} h needs was removed",
            highlight=False,
        )
    console.print(f"drain {report.drain} is maintained")
    return 0
