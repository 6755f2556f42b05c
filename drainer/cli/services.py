"""`drainer services up|down|status` and `drainer topics create`."""

from __future__ import annotations

import argparse

from drainer.cli.args import Subcommands, add_command
from drainer.cli.output import console
from drainer.config import get_drain


def register(sub: Subcommands) -> None:
    p = add_command(sub, "services", cmd_services, "local Kafka and Postgres for development")
    p.add_argument("action", choices=["up", "down", "status"])
    p = add_command(sub, "topics", cmd_topics, "create a drain's level topics")
    p.add_argument("action", choices=["create"])
    p.add_argument("drain")


def cmd_services(args: argparse.Namespace) -> int:
    from drainer import services

    if args.action == "up":
        services.up(echo=console.print)
    elif args.action == "down":
        services.down(echo=console.print)
    else:
        for item in services.status():
            console.print(item.line())
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from drainer.kafka.session import KafkaSession

    drain = get_drain(args.drain)
    extra = [drain.dlq_topic] if drain.dlq_topic else []
    with KafkaSession(drain) as kafka:
        created = kafka.create_topics(extra)
    wanted = [drain.level_topic(lvl) for lvl in range(drain.levels)] + extra
    for topic in wanted:
        state = "created" if topic in created else "exists"
        console.print(f"{topic:<30} {state} ({drain.partitions} partitions)")
    return 0
