"""`drainer produce`: synthetic records, or JSON lines from stdin, at a priority level."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from drainer.cli.args import Subcommands, add_command, get_drain
from drainer.cli.output import console, progress
from drainer.errors import ConfigError

# formats whose values stdin gives as JSON and `drainer produce` encodes (and checks); string
# and bytes values are sent as they are
STRUCTURED = ("json", "avro", "protobuf")

if TYPE_CHECKING:
    from drainer.config.formats import RecordFormat
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
        '"headers": {"name": "text"}, "timestamp_ms": epoch milliseconds}, `value` required '
        "(null: a tombstone)",
    )
    p.add_argument(
        "--format",
        choices=["json", "avro", "protobuf", "string", "bytes"],
        help="encode values so (synthetic ones follow --schema; stdin values are encoded; "
        "string and bytes: a stdin value's text is sent as it is, unchecked); "
        "default: the drain's declared `value` format, else synthetic JSON",
    )
    p.add_argument(
        "--schema",
        help="json: a Spark DDL string or JSON Schema file; avro: the writer schema (.avsc); "
        "protobuf: a FileDescriptorSet file (protoc --include_imports --descriptor_set_out)",
    )
    p.add_argument("--message", help="protobuf: the message's full name, e.g. shop.Order")
    p.add_argument(
        "--registry",
        metavar="URL",
        help="avro or protobuf in the Confluent wire format: register --schema under "
        "<topic>-value here",
    )


def cmd_produce(args: argparse.Namespace) -> int:
    from drainer.kafka.producer import json_line_records, produce_records, synthetic_records
    from drainer.kafka.session import KafkaSession
    from drainer.records.encode import encoder

    drain = get_drain(args.drain, args.settings)
    drain.check_level(args.level)
    topic = drain.level_topic(args.level)
    fmt = _format(args, drain.value)
    records: Iterable[OutRecord]
    if args.stdin:
        encode = None
        if fmt is not None and fmt.format in STRUCTURED:
            encode, _ = encoder(fmt, topic)
        # every line checked (and encoded) before one is sent
        records = list(json_line_records(sys.stdin, encode, fmt.format if fmt else ""))
        total: int | None = len(records)
    elif fmt is not None:
        records = _synthetic_in_format(args, fmt, topic)
        total = args.count
    else:
        records = synthetic_records(
            args.count, keys=args.keys, value_size=args.value_size, seed=args.seed
        )
        total = args.count
    with KafkaSession(drain, args.settings) as kafka:
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


def _format(args: argparse.Namespace, declared: RecordFormat | None) -> RecordFormat | None:
    """The format values are produced in: the flags', else the drain's declared json/avro."""
    from drainer.config.formats import RecordFormat

    if args.format is None:
        if args.schema or args.registry or args.message:
            raise ConfigError("--schema, --message and --registry go with --format")
        return declared if declared is not None and declared.format in STRUCTURED else None
    body: dict[str, object] = {"format": args.format}
    if args.schema:
        body["schema"] = args.schema
    if args.registry:
        body["registry"] = {"url": args.registry}
    if args.message:
        body["message"] = args.message
    try:
        return RecordFormat.model_validate(body)
    except ValueError as err:
        raise ConfigError(f"--format {args.format}: {err}") from None


def _synthetic_in_format(
    args: argparse.Namespace, fmt: RecordFormat, topic: str
) -> Iterator[OutRecord]:
    from drainer.kafka.producer import OutRecord
    from drainer.records.encode import encoder, synthetic_values

    encode, fields = encoder(fmt, topic)
    for seq, value in enumerate(synthetic_values(fields, args.count, args.seed)):
        key = f"key-{(seq * 7919 + args.seed) % max(args.keys, 1)}"
        yield OutRecord(value=encode(value), key=key.encode())
