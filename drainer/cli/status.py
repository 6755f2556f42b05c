"""`drainer status` (where a drain stands) and `drainer rewind` (move offsets, audited)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from drainer.cli.args import Subcommands, add_command, get_drain
from drainer.cli.output import console, print_table
from drainer.cli.routed_tables import print_routed_tables
from drainer.error_text import cause_in_text
from drainer.errors import ConfigError


def register(sub: Subcommands) -> None:
    p = add_command(
        sub,
        "status",
        cmd_status,
        "backlog per level and partition, recent runs, fill ratios, burst state",
    )
    p.add_argument("drain")
    p.add_argument("--recent", type=int, default=10)
    p.add_argument("--json", action="store_true")

    p = add_command(
        sub,
        "rewind",
        cmd_rewind,
        "move a level's committed offsets to an offset or a time (audited)",
    )
    p.add_argument("drain")
    p.add_argument("--level", type=int, required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to-offset", type=int, help="offset to resume from (clamped to what Kafka has)"
    )
    target.add_argument("--to-time", help="ISO time: resume from the first record at or after it")
    target.add_argument(
        "--to-earliest",
        action="store_true",
        help="resume from the first record Kafka still has (e.g. after a topic was recreated)",
    )
    p.add_argument("--partitions", type=int, nargs="*", help="only these partitions")
    p.add_argument("--reason", required=True, help="why, for the audit trail (required)")


def cmd_status(args: argparse.Namespace) -> int:
    from drainer.observe.status import drain_status

    drain = get_drain(args.drain, args.settings)
    report = drain_status(drain, args.settings, recent=args.recent)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    print_table(
        f"{drain.name}: backlog by level",
        [
            "level",
            "topic",
            "partitions",
            "backlog",
            "committed",
            "end offset",
            "lost to retention",
            "burst eligible",
        ],
        [
            [
                str(lv["level"]),
                lv["topic"],
                len(lv["partitions"]),
                lv["backlog"],
                lv["committed"],
                lv["end"],
                lv["lost_to_retention"],
                lv["burst_eligible"],
            ]
            for lv in report["levels"]
        ],
    )
    print_health(report)
    print_table(
        "recent runs",
        [
            "run",
            "status",
            "levels",
            "drained",
            "lost",
            "fill ratios (level: ratio)",
            "duration",
            "when",
        ],
        [
            [
                str(r["id"]),
                r["status"],
                ",".join(map(str, r["levels"])),
                r["drained"],
                r["lost_to_retention"],
                ", ".join(
                    f"{lvl}: {fr:.2f}"
                    for lvl, fr in sorted(r["fill_ratios"].items(), reverse=True)
                    if fr is not None
                ),
                _seconds(r),
                str(r["planned_at"])[:19],
            ]
            for r in report["runs"]
        ],
        justify="left",
    )
    if report["retention_losses"]:
        print_table(
            "offsets deleted by Kafka retention before they were drained",
            ["run", "topic", "partition", "offsets", "lost"],
            [
                [
                    str(x["run_id"]),
                    x["topic"],
                    str(x["partition"]),
                    f"{x['first_offset']}..{x['end_offset'] - 1}",
                    x["records"],
                ]
                for x in report["retention_losses"]
            ],
            justify="left",
        )
    from rich.markup import escape

    for r in report["runs"]:
        if r["status"] in ("planned", "running", "failed") and r["error"]:
            console.print(
                f"[yellow]run {r['id']} is {r['status']} after {r['attempts']} attempt(s): "
                f"{escape(cause_in_text(r['error']))}[/]\nresume it with `drainer run {drain.name}`"
                + ("" if r["error"].startswith("interrupted") else " once the cause is fixed")
                + f", or end it with `drainer plan abandon {drain.name} --reason TEXT`",
                highlight=False,
                soft_wrap=True,
            )
    sink = report["sink"]
    console.print(f"sink: {sink['type']} {sink['location']}", highlight=False)
    for r in report["runs"]:
        if r.get("columns_added"):
            console.print(
                f"run {r['id']}: columns added: {', '.join(r['columns_added'])}", highlight=False
            )
    commits = [r for r in report["runs"] if r["table_commit"]]
    if commits:
        # files where the sink's commits add them (a table format's), not a Kafka sink's
        files = any("files_added" in r["table_commit"] for r in commits)
        print_table(
            f"{sink['type']} commits",
            ["run", sink["commit_id"], *(["files"] if files else []), "bytes", sink["rows"]],
            [
                [
                    str(r["id"]),
                    str(r["table_commit"]["version"]),
                    *([r["table_commit"].get("files_added", 0)] if files else []),
                    r["table_commit"]["bytes_added"],
                    r["table_commit"]["rows_added"],
                ]
                for r in commits
            ],
            justify="left",
        )
        _commit_details(commits)
    print_routed_tables((r["id"], r["table_commit"], r["table_rows"]) for r in report["runs"])
    _upsert_counts(report["runs"])
    per_level = ", ".join(
        f"level {lv['level']}: {lv['dead_letters']:,}"
        for lv in report["levels"]
        if lv.get("dead_letters")
    )
    console.print(
        f"dead letters: {report['dead_letters']:,}" + (f" ({per_level})" if per_level else "")
    )
    if report["run_budget"]["summary"] is not None:
        console.print(f"next run's budget: {report['run_budget']['summary']}", highlight=False)
    return 0


def print_health(report: dict[str, Any]) -> None:
    """Each level's health: Burrow's state, how old its oldest waiting record is, the rates
    and when it will be empty."""
    from drainer.observe.health_rules import format_seconds

    def rate(value: float | None) -> str:
        return "" if value is None else f"{value:,.1f}/s"

    print_table(
        "health by level",
        ["level", "state", "oldest waiting", "arriving", "draining", "empty in", "why"],
        [
            [
                str(lv["level"]),
                lv["health"]["state"],
                ""
                if lv["health"]["oldest_age_s"] is None
                else format_seconds(lv["health"]["oldest_age_s"]),
                rate(lv["health"]["arrival_rate"]),
                rate(lv["health"]["drain_rate"]),
                lv["health"]["eta"],
                lv["health"]["reason"],
            ]
            for lv in report["levels"]
        ],
        justify="left",
    )


def cmd_rewind(args: argparse.Namespace) -> int:
    from datetime import datetime

    from drainer.lifecycle.rewind import rewind

    drain = get_drain(args.drain, args.settings)
    to_time = None
    if args.to_time:
        try:
            to_time = datetime.fromisoformat(args.to_time)
        except ValueError:
            raise ConfigError(
                f"--to-time {args.to_time!r} is not an ISO time like 2026-11-20T14:00:00+00:00"
            ) from None
    moved = rewind(
        drain,
        args.level,
        args.to_offset,
        to_time,
        args.partitions,
        args.reason,
        to_earliest=args.to_earliest,
        settings=args.settings,
    )
    print_table(
        f"rewound {drain.level_topic(args.level)} (audited in offset_rewinds)",
        ["partition", "from", "to", "records to redo"],
        [
            [str(m.partition), m.from_offset, m.to_offset, max(0, m.from_offset - m.to_offset)]
            for m in moved
        ],
    )
    return 0


def _seconds(run: dict[str, Any]) -> str:
    """The run's whole slot (through commit, mirror and upkeep) when stored, else the time
    up to its commit."""
    seconds = run["slot_s"] if run.get("slot_s") is not None else run["duration_s"]
    return "" if seconds is None else f"{seconds:.1f} s"


def _upsert_counts(runs: list[dict[str, Any]]) -> None:
    """A state table's merge per run: keys inserted, updated, deleted, versions skipped."""
    names = ("rows_inserted", "rows_updated", "rows_deleted", "rows_skipped_older")
    rows = [[str(r["id"]), *(u.get(n, 0) for n in names)] for r in runs if (u := r.get("upsert"))]
    if rows:
        print_table(
            "upserts per run",
            ["run", "inserted", "updated", "deleted", "skipped as older"],
            rows,
            justify="left",
        )


def _commit_details(commits: list[dict[str, Any]]) -> None:
    """What a sink recorded beyond the table (a Kafka sink: records per output topic, its
    transactional id, the attempts aborted before the one that committed)."""
    rows = [
        [
            str(r["id"]),
            ", ".join(f"{t}: {n:,}" for t, n in sorted(d.get("produced", {}).items())),
            str(d.get("transactional_id", "")),
            d.get("aborted_attempts", 0),
            str(d.get("producer", "")),
        ]
        for r in commits
        if (d := r["table_commit"].get("details")) and not {"upsert", "tables"} & set(d)
    ]
    if rows:
        print_table(
            "produced per run",
            ["run", "records per topic", "transactional id", "aborted attempts", "producer"],
            rows,
            justify="left",
        )
