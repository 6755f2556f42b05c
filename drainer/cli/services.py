"""`drainer services up|down|status` and `drainer topics create`."""

from __future__ import annotations

import argparse

from drainer.cli.args import Subcommands, add_command, get_drain
from drainer.cli.output import console, err_console


def register(sub: Subcommands) -> None:
    p = add_command(sub, "services", cmd_services, "local Kafka and Postgres for development")
    p.add_argument("action", choices=["up", "down", "status"])
    p = add_command(sub, "topics", cmd_topics, "create a drain's level topics")
    p.add_argument("action", choices=["create"])
    p.add_argument("drain")


def cmd_services(args: argparse.Namespace) -> int:
    from drainer import services

    if args.action == "up":
        services.up(args.settings, echo=console.print)
    elif args.action == "down":
        services.down(args.settings, echo=console.print)
    else:
        for item in services.status(args.settings):
            console.print(item.line())
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from drainer.kafka.session import KafkaSession

    drain = get_drain(args.drain, args.settings)
    extra = [drain.dlq_topic] if drain.dlq_topic else []
    with KafkaSession(drain, args.settings) as kafka:
        created = kafka.create_topics(extra)
        wanted = [drain.level_topic(lvl) for lvl in range(drain.levels)] + extra
        counts = kafka.partition_counts(wanted)
    for topic in wanted:
        state = "created" if topic in created else "exists"
        console.print(f"{topic:<30} {state} ({counts[topic]} partitions)")
    differ = [t for t in wanted if counts[t] != drain.partitions]
    if differ:  # Kafka never shrinks a topic, and drainer reads what partitions there are
        err_console.print(
            f"[yellow]warning:[/] {', '.join(differ)} already {'has' if len(differ) == 1 else 'have'} "
            f"{'/'.join(str(counts[t]) for t in differ)} partitions, not the {drain.partitions} "
            f"that `{drain.name}.partitions` asks for: drainer reads the partitions a topic has; "
            f"set `partitions: {counts[differ[0]]}` to match, or add partitions with Kafka's "
            f"`kafka-topics.sh --alter --partitions {drain.partitions}`",
            highlight=False,
            soft_wrap=True,
        )
    return 0
