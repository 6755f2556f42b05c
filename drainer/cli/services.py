"""`drainer services up|down|status` and `drainer topics create`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from drainer.cli.args import Subcommands, add_command, get_drain
from drainer.cli.output import console, err_console

if TYPE_CHECKING:
    from drainer.config import DrainConfig


def register(sub: Subcommands) -> None:
    p = add_command(sub, "services", cmd_services, "local Kafka and Postgres for development")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="up: when the Connect server must restart while runs use it, wait this long for them",
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help="up: restart the Connect server even while runs use it (they fail and resume later)",
    )
    p = add_command(
        sub,
        "topics",
        cmd_topics,
        "create a drain's topics: its level topics, DLQ topic and Kafka sink's output topic",
    )
    p.add_argument("action", choices=["create"])
    p.add_argument("drain", help="the drain's name in the drains file (not a topic name)")
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME",
        help="also a plain topic on the drain's cluster, e.g. one a processor routes rows to "
        "(repeatable; the drain's partitions and replication factor)",
    )


def cmd_services(args: argparse.Namespace) -> int:
    from drainer import services

    if args.action == "up":
        services.up(args.settings, echo=console.print, restart=args.restart, wait_s=args.wait)
    elif args.action == "down":
        services.down(args.settings, echo=console.print)
    else:
        for item in services.status(args.settings):
            console.print(item.line())
    return 0


def output_topics(drain: DrainConfig) -> list[str]:
    """The output topic of a Kafka sink that produces to the drain's own cluster (one of
    its own, `sink.kafka`, is not this command's to reach)."""
    topic = getattr(drain.sink, "topic", None)
    on_own_cluster = getattr(drain.sink, "kafka", None) is None
    return [topic] if isinstance(topic, str) and on_own_cluster else []


def compacted_topics(drain: DrainConfig) -> list[str]:
    """The output topic of a Kafka sink that upserts: compaction keeps its last record per key."""
    return output_topics(drain) if getattr(drain.sink, "write", None) == "upsert" else []


def cmd_topics(args: argparse.Namespace) -> int:
    from drainer.kafka.session import KafkaSession

    drain = get_drain(args.drain, args.settings)
    dlq = [drain.dlq_topic] if drain.dlq_topic else []
    extra = list(dict.fromkeys([*dlq, *output_topics(drain), *args.topic]))
    with KafkaSession(drain, args.settings) as kafka:
        created = kafka.create_topics(extra, compacted_topics(drain))
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
