"""`drainer dlq list|show|retry`: dead letters, what they hold and why, and retrying them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from drainer.cli.args import Subcommands, add_command, get_drain
from drainer.cli.output import console, print_table
from drainer.errors import ConfigError

if TYPE_CHECKING:
    from drainer.config import DrainConfig

PREVIEW = 40  # characters of a payload in `dlq list`; `dlq show` prints it whole


def register(sub: Subcommands) -> None:
    p = add_command(
        sub,
        "dlq",
        cmd_dlq,
        "dead letters: list them, show one (payload and reason), or retry them: the drain's "
        "next run processes them again (this drain only; nothing is sent to Kafka)",
    )
    p.add_argument("action", choices=["list", "show", "retry"])
    p.add_argument("drain")
    p.add_argument("id", nargs="?", type=int, help="show: the dead letter's id")
    p.add_argument("--ids", type=int, nargs="*", help="retry only these dead letter ids")
    p.add_argument(
        "--value-from",
        metavar="FILE",
        type=Path,
        help="retry: the one dead letter --ids names is retried with this file's bytes as "
        "its value (a fixed record)",
    )
    p.add_argument(
        "--as-is",
        action="store_true",
        help="retry: also records that did not decode, unchanged (the drain's format was fixed)",
    )
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--all", action="store_true", help="list retried ones too")
    p.add_argument("--json", action="store_true")


def cmd_dlq(args: argparse.Namespace) -> int:
    from drainer.lifecycle import dlq

    drain = get_drain(args.drain, args.settings)
    if args.action == "show":
        return _show(args, drain)
    if args.id is not None:
        raise ConfigError(
            f"`drainer dlq {args.action}` takes no id (`--ids` names dead letters to retry; "
            f"`drainer dlq show {drain.name} ID` shows one)"
        )
    if args.action == "retry":
        value = _value_from(args.value_from)
        retried = dlq.retry_dead_letters(
            drain, args.settings, ids=args.ids or None, value=value, as_is=args.as_is
        )
        console.print(
            f"requested a retry of {retried:,} dead letters: the next `drainer run "
            f"{drain.name}` processes them again (only this drain; nothing is sent to Kafka)",
            highlight=False,
        )
        left = 0 if args.ids or args.as_is else dlq.undecodable_left(drain, args.settings)
        if left:
            console.print(
                f"{left:,} dead letters that did not decode were left as they are (they would "
                f"fail again): fix one with `drainer dlq retry {drain.name} --ids ID "
                "--value-from FILE`, or retry them `--as-is` once the drain's format is fixed",
                highlight=False,
            )
        return 0
    rows = dlq.list_dead_letters(drain, args.settings, limit=args.limit, include_retried=args.all)
    if args.json:
        print(json.dumps([_without_payload(r) for r in rows], indent=2, default=str))
        return 0
    print_table(
        f"dead letters of {drain.name}",
        [
            "id",
            "topic",
            "partition",
            "offset",
            "key",
            "attempts",
            "error",
            "value",
            "retry requested",
            "retried",
        ],
        [
            [
                str(r["id"]),
                r["topic"],
                str(r["partition"]),
                str(r["offset"]),
                r["key"] or "",
                str(r["attempts"]),
                (r["error"] or "")[:80],
                _preview(r),
                str(r["retry_requested_at"] or ""),
                str(r["retried_at"] or ""),
            ]
            for r in rows
        ],
        justify="left",
    )
    return 0


def _show(args: argparse.Namespace, drain: DrainConfig) -> int:
    from drainer.lifecycle import dlq

    name = drain.name
    if args.id is None:
        raise ConfigError(f"`drainer dlq show {name} ID`: which dead letter (`dlq list` shows ids)")
    row = dlq.show_dead_letter(drain, args.settings, args.id)
    if args.json:
        print(json.dumps(_without_payload(row), indent=2, default=str))
        return 0
    retried = f", retried {row['retried_at']}" if row["retried_at"] else ""
    if not retried and row["retry_requested_at"]:
        retried = f", retry requested {row['retry_requested_at']} (the next run retries it)"
    console.print(
        f"dead letter {row['id']} of {name}: {row['topic']}[{row['partition']}]@{row['offset']} "
        f"(level {row['level']}), {row['attempts']} attempt(s), run {row['run_id']}{retried}",
        highlight=False,
    )
    console.print(f"reason: {row['error']}", highlight=False, markup=False)
    console.print(f"key: {row['key']}", highlight=False, markup=False)
    for header, value in row["headers"]:
        console.print(f"header {header}: {value}", highlight=False, markup=False)
    console.print("value:", highlight=False)
    console.print(row["payload"], highlight=False, markup=False, soft_wrap=True)
    return 0


def _without_payload(row: dict[str, object]) -> dict[str, object]:
    """JSON carries `value` (text, when UTF-8) and `value_base64`; `payload` is for terminals."""
    return {k: v for k, v in row.items() if k != "payload"}


def _preview(row: dict[str, object]) -> str:
    text = " ".join(str(row["payload"]).split())
    return text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"


def _value_from(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as err:
        raise ConfigError(f"--value-from {path}: {err.strerror or err}") from None
