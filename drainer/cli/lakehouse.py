"""`drainer table maintain <drain>`: compaction and expiry of a drain's Delta or Iceberg table.

The work runs on Spark (spark_jobs.lakehouse_maintenance), injected like `drainer run`'s
executor: this package imports no pyspark.
"""

from __future__ import annotations

import argparse
import json

from drainer.cli.args import add_command
from drainer.cli.output import console
from drainer.config import get_drain
from drainer.errors import ConfigError

DEFAULT_RETENTION_HOURS = 7 * 24


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub,
        "table",
        cmd_table,
        "lakehouse sinks: `table maintain <drain>` compacts small files (Delta OPTIMIZE, "
        "Iceberg rewrite_data_files) and removes files and snapshots older than the retention "
        "(Delta VACUUM, Iceberg expire_snapshots)",
    )
    p.add_argument("action", choices=["maintain"])
    p.add_argument("drain")
    p.add_argument(
        "--retention-hours",
        type=float,
        default=DEFAULT_RETENTION_HOURS,
        help="keep what readers of this many past hours need (default 168: 7 days)",
    )
    p.add_argument("--force", action="store_true", help="allow a retention below 7 days")
    p.add_argument("--json", action="store_true")


def cmd_table(args: argparse.Namespace) -> int:
    drain = get_drain(args.drain)
    if args.maintainer is None:
        raise ConfigError("table maintenance needs Spark: run it through the `drainer` command")
    report = args.maintainer()(drain, args.retention_hours, args.force)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    console.print(
        f"{drain.name}: {report['format']} table {report['location']}: "
        f"{report['files_removed']} files compacted into {report['files_added']}; "
        f"nothing a reader of the last {report['retention_hours']:g} h needs was removed",
        highlight=False,
    )
    return 0
