"""`drainer maintain <drain>`: the upkeep every run does after its commit, done to the end now.

Folds the sink's partitions until the target is as small as it gets and prunes run detail older
than `history_days` to daily totals; one command that grows as more kinds of upkeep arrive.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from drainer.cli.args import Subcommands, add_command
from drainer.cli.output import console, print_table
from drainer.config import get_drain


def register(sub: Subcommands) -> None:
    p = add_command(
        sub,
        "maintain",
        cmd_maintain,
        "fold the sink's partitions (and whatever else runs keep bounded) to the end, now",
    )
    p.add_argument("drain")
    p.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS", help="wait for a running run"
    )
    p.add_argument("--json", action="store_true")


def cmd_maintain(args: argparse.Namespace) -> int:
    from drainer.lifecycle.maintain import maintain_drain

    report = maintain_drain(get_drain(args.drain), wait_s=args.wait)
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
    console.print(f"drain {report.drain} is maintained")
    return 0
