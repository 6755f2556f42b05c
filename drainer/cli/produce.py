"""`drainer produce`: synthetic records, or JSON lines from stdin, at a priority level."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from drainer.cli.args import Subcommands, add_command, get_drain
from drainer.cli.output import console, progress

if TYPE_CHECKING:
    from drainer.kafka.producer import OutRecord


def register(sub: Subcommands) -> None:
    p = add_command(
        sub,
        "produce",
        cmd_produce,
        "send records at a priority level (synthetic, or JSON lines from stdin)",
    )
    p.add_argument("drain")
    p.add_argument("--level", type=int, default=0, help="priority level (default 0, the lowest)")
    p.add_argument("--count", type=int, default=1000, help="synthetic records to send")
    p.add_argument("--keys", type=int, default=100, help="distinct keys of synthetic records")
    p.add_argument("--value-size", type=int, default=100, help="bytes per synthetic value")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--stdin",
        action="store_true",
        help='read JSON lines from stdin instead: {"value": ..., "key": ..., '
        '"headers": {"name": "text"}, "timestamp_ms": epoch milliseconds}, `value` required',
    )


def cmd_produce(args: argparse.Namespace) -> int:
    from drainer.kafka.producer import json_line_records, produce_records, synthetic_records
    from drainer.kafka.session import KafkaSession

    drain = get_drain(args.drain)
    drain.check_level(args.level)
    records: Iterable[OutRecord]
    if args.stdin:
        records = list(json_line_records(sys.stdin))  # every line checked before one is sent
        total: int | None = len(records)
    else:
        records = synthetic_records(
            args.count, keys=args.keys, value_size=args.value_size, seed=args.seed
        )
        total = args.count
    topic = drain.level_topic(args.level)
    with KafkaSession(drain) as kafka:
        kafka.partitions([args.level])  # a missing topic: one line now, not a 30 s wait
        with progress() as bar:
            task = bar.add_task(f"producing to {topic}", total=total)
            sent = produce_records(
                drain,
                records,
                level=args.level,
                on_progress=lambda n: bar.update(task, completed=n),
                kafka=kafka,
            )
    console.print(f"produced {sent:,} records to {topic} (level {args.level})")
    return 0
