"""`drainer dlq list|retry`: dead letters, and re-producing them to their level topics."""

from __future__ import annotations

import argparse
import json

from drainer.cli.args import Subcommands, add_command, get_drain
from drainer.cli.output import console, print_table


def register(sub: Subcommands) -> None:
    p = add_command(
        sub, "dlq", cmd_dlq, "dead letters: list them, or retry them by re-producing to their level"
    )
    p.add_argument("action", choices=["list", "retry"])
    p.add_argument("drain")
    p.add_argument("--ids", type=int, nargs="*", help="retry only these dead letter ids")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--all", action="store_true", help="list retried ones too")
    p.add_argument("--json", action="store_true")


def cmd_dlq(args: argparse.Namespace) -> int:
    from drainer.lifecycle import dlq

    drain = get_drain(args.drain, args.settings)
    if args.action == "retry":
        retried = dlq.retry_dead_letters(drain, args.settings, ids=args.ids or None)
        console.print(
            f"re-produced {retried:,} dead letters to their level topics; "
            "they drain in the next runs"
        )
        return 0
    rows = dlq.list_dead_letters(drain, args.settings, limit=args.limit, include_retried=args.all)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    print_table(
        f"dead letters of {drain.name}",
        ["id", "topic", "partition", "offset", "key", "attempts", "error", "retried"],
        [
            [
                str(r["id"]),
                r["topic"],
                str(r["partition"]),
                str(r["offset"]),
                r["key"] or "",
                str(r["attempts"]),
                (r["error"] or "")[:80],
                str(r["retried_at"] or ""),
            ]
            for r in rows
        ],
        justify="left",
    )
    return 0
