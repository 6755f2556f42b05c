"""`drainer`: the command line (DESIGN §9). Same code paths as Dagster, no Dagster needed.

Errors that are the user's to fix (config, unknown level, unreachable service, busy drain)
print one clear message and exit with status 2 (3 for a busy drain); nothing is changed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from drainer.config import ConfigError, DrainConfig, get_drain

console = Console()
err_console = Console(stderr=True)

# Errors a user can act on; anything else is a bug and keeps its traceback.
_USER_ERRORS: tuple[type[Exception], ...] = (ConfigError,)


def _user_errors() -> tuple[type[Exception], ...]:
    from drainer.db import DatabaseUnavailable
    from drainer.kafka_io import KafkaUnavailable
    from drainer.services import ServiceError
    from drainer.state import CommitConflict, FencedOut

    return (
        *_USER_ERRORS,
        DatabaseUnavailable,
        KafkaUnavailable,
        ServiceError,
        CommitConflict,
        FencedOut,
    )


# ---------------------------------------------------------------- services and topics


def cmd_services(args: argparse.Namespace) -> int:
    from drainer import services

    echo = console.print
    if args.action == "up":
        services.up(echo=echo)
    elif args.action == "down":
        services.down(echo=echo)
    if args.action == "status":
        for item in services.status():
            console.print(item.line())
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from drainer.kafka_io import create_topics

    drain = get_drain(args.drain)
    extra = [drain.dlq_topic] if drain.dlq_topic else []
    created = create_topics(drain, extra)
    wanted = [drain.level_topic(lvl) for lvl in range(drain.levels)] + extra
    for topic in wanted:
        state = "created" if topic in created else "exists"
        console.print(f"{topic:<30} {state} ({drain.partitions} partitions)")
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    from drainer.producer import json_line_records, produce_records, synthetic_records

    drain = get_drain(args.drain)
    drain.check_level(args.level)
    if args.stdin:
        records = json_line_records(sys.stdin)
        total = None
    else:
        records = synthetic_records(
            args.count, keys=args.keys, value_size=args.value_size, seed=args.seed
        )
        total = args.count
    with _progress() as progress:
        task = progress.add_task(f"producing to {drain.level_topic(args.level)}", total=total)
        sent = produce_records(
            drain,
            records,
            level=args.level,
            on_progress=lambda n: progress.update(task, completed=n),
        )
    console.print(
        f"produced {sent:,} records to {drain.level_topic(args.level)} (level {args.level})"
    )
    return 0


# ---------------------------------------------------------------- plan, run, status


def cmd_plan(args: argparse.Namespace) -> int:
    from drainer.db import get_engine
    from drainer.planning import plan_next_run
    from drainer.state import open_run

    drain = get_drain(args.drain)
    engine = get_engine()
    with engine.connect() as conn:
        pending = open_run(conn, drain.name)
    if pending is not None:
        return _show_open_run(drain, pending, args.json)
    planned = plan_next_run(engine, drain, args.levels)
    plan = planned.plan
    if args.json:
        print(json.dumps(_plan_json(drain, planned), indent=2))
        return 0
    table = Table(
        title=f"next run of {drain.name}: budget {drain.budget:,}, levels {planned.levels}"
    )
    for column in ("level", "reserved", "burst", "allocated", "backlog", "planned"):
        table.add_column(column, justify="right")
    for lp in sorted(plan.levels.values(), key=lambda lp: -lp.level):
        table.add_row(
            *(
                f"{v:,}" if isinstance(v, int) and k != "level" else str(v)
                for k, v in vars(lp).items()
            )
        )
    table.add_row(
        "total",
        "",
        "",
        "",
        f"{sum(lp.backlog for lp in plan.levels.values()):,}",
        f"{plan.total_planned:,}",
        style="bold",
    )
    console.print(table)
    parts = Table(title="ranges")
    for column in ("topic", "partition", "start", "end", "records"):
        parts.add_column(column, justify="right")
    for r in plan.ranges:
        parts.add_row(
            drain.level_topic(r.level),
            str(r.partition),
            f"{r.start:,}",
            f"{r.end:,}",
            f"{r.records:,}",
        )
    console.print(parts)
    if plan.held_back:
        console.print(f"held back by event-time alignment (max_gap): {plan.held_back}")
    return 0


def _show_open_run(drain: DrainConfig, run, as_json: bool) -> int:
    """The next run resumes this uncommitted plan, so that is what `plan` must show."""
    note = (
        f"run {run.id} of {drain.name} is {run.status} after {run.attempts} attempt(s): "
        "the next run resumes it with these same ranges"
    )
    ranges = [vars(r) for r in run.ranges]
    if as_json:
        print(
            json.dumps(
                {
                    "drain": drain.name,
                    "resumes_run": run.id,
                    "status": run.status,
                    "levels": run.levels,
                    "ranges": ranges,
                    "total_planned": sum(r["records"] for r in ranges),
                    "note": note,
                },
                indent=2,
            )
        )
        return 0
    console.print(f"[yellow]{note}[/]")
    table = Table(title=f"ranges of run {run.id}")
    for column in ("topic", "partition", "start", "end", "records"):
        table.add_column(column, justify="right")
    for r in run.ranges:
        table.add_row(r.topic, str(r.partition), f"{r.start:,}", f"{r.end:,}", f"{r.records:,}")
    console.print(table)
    return 0


def _plan_json(drain: DrainConfig, planned) -> dict:
    plan = planned.plan
    return {
        "drain": drain.name,
        "budget": drain.budget,
        "levels": [vars(lp) for lp in sorted(plan.levels.values(), key=lambda lp: -lp.level)],
        "ranges": [{"topic": drain.level_topic(r.level), **vars(r)} for r in plan.ranges],
        "total_planned": plan.total_planned,
        "cutoff_timestamp": plan.cutoff_timestamp,
        "held_back": [list(x) for x in plan.held_back],
    }


def cmd_run(args: argparse.Namespace) -> int:
    from drainer.state import DrainBusy

    # the Spark job is this command's executor; drainer itself never imports pyspark
    drain_job = importlib.import_module("spark_jobs.drain_job")
    drain = get_drain(args.drain)
    try:
        with console.status(f"running drain {drain.name} on Spark…"):
            result = drain_job.run(drain, levels=args.levels, trigger="cli", wait_s=args.wait)
    except DrainBusy as err:
        err_console.print(f"[yellow]drainer:[/] {err}")
        return 3
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
        return 0
    if result.finished is not None:  # an open plan for other levels was finished first
        print_run_table(result.finished, note="open plan of other levels, finished first")
    print_run_table(result)
    return 0


def print_run_table(result, note: str | None = None) -> None:
    title = f"run {result.run_id} of {result.drain}" + (" (resumed)" if result.resumed else "")
    title += f": {note}" if note else ""
    table = Table(title=title)
    for column in (
        "level",
        "reserved",
        "burst",
        "planned",
        "drained",
        "failed",
        "dead",
        "fill",
        "backlog before",
        "backlog after",
    ):
        table.add_column(column, justify="right")
    for lv in result.levels:
        table.add_row(
            str(lv.level),
            f"{lv.reserved:,}",
            f"{lv.burst:+,}",
            f"{lv.planned:,}",
            f"{lv.drained:,}",
            f"{lv.failed:,}",
            f"{lv.dead_lettered:,}",
            f"{lv.fill_ratio:.2f}",
            f"{lv.backlog_before:,}",
            f"{lv.backlog_after:,}",
        )
    table.add_row(
        "total",
        "",
        "",
        f"{sum(lv.planned for lv in result.levels):,}",
        f"{result.drained:,}",
        style="bold",
    )
    console.print(table)
    console.print(
        f"{result.drained:,} records in {result.duration_s:.1f} s; {result.published_rows:,} sink rows published"
    )


def cmd_status(args: argparse.Namespace) -> int:
    from drainer.status import drain_status

    drain = get_drain(args.drain)
    report = drain_status(drain, recent=args.recent)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    levels = Table(title=f"{drain.name}: backlog by level")
    for column in (
        "level",
        "topic",
        "partitions",
        "backlog",
        "committed",
        "end offset",
        "burst eligible",
    ):
        levels.add_column(column, justify="right")
    for lv in report["levels"]:
        levels.add_row(
            str(lv["level"]),
            lv["topic"],
            str(len(lv["partitions"])),
            f"{lv['backlog']:,}",
            f"{lv['committed']:,}",
            f"{lv['end']:,}",
            "yes" if lv["burst_eligible"] else "no",
        )
    console.print(levels)
    runs = Table(title="recent runs")
    for column in (
        "run",
        "status",
        "levels",
        "drained",
        "fill ratios (level: ratio)",
        "duration",
        "when",
    ):
        runs.add_column(column)
    for r in report["runs"]:
        fills = ", ".join(
            f"{lvl}: {fr:.2f}"
            for lvl, fr in sorted(r["fill_ratios"].items(), reverse=True)
            if fr is not None
        )
        duration = f"{r['duration_s']:.1f} s" if r["duration_s"] is not None else ""
        runs.add_row(
            str(r["id"]),
            r["status"],
            ",".join(map(str, r["levels"])),
            f"{r['drained']:,}",
            fills,
            duration,
            str(r["planned_at"])[:19],
        )
    console.print(runs)
    console.print(f"dead letters: {report['dead_letters']:,}")
    return 0


def cmd_rewind(args: argparse.Namespace) -> int:
    from datetime import datetime

    from drainer.rewind import rewind

    drain = get_drain(args.drain)
    to_time = None
    if args.to_time:
        try:
            to_time = datetime.fromisoformat(args.to_time)
        except ValueError:
            raise ConfigError(
                f"--to-time {args.to_time!r} is not an ISO time like 2026-11-20T14:00:00+00:00"
            ) from None
    moved = rewind(drain, args.level, args.to_offset, to_time, args.partitions, args.reason)
    table = Table(title=f"rewound {drain.level_topic(args.level)} (audited in offset_rewinds)")
    for column in ("partition", "from", "to", "records to redo"):
        table.add_column(column, justify="right")
    for m in moved:
        table.add_row(
            str(m.partition),
            f"{m.from_offset:,}",
            f"{m.to_offset:,}",
            f"{max(0, m.from_offset - m.to_offset):,}",
        )
    console.print(table)
    return 0


# ---------------------------------------------------------------- dead letters


def cmd_dlq(args: argparse.Namespace) -> int:
    from drainer import dlq

    drain = get_drain(args.drain)
    if args.action == "list":
        rows = dlq.list_dead_letters(drain, limit=args.limit, include_retried=args.all)
        if args.json:
            print(json.dumps(rows, indent=2, default=str))
            return 0
        table = Table(title=f"dead letters of {drain.name}")
        for column in ("id", "topic", "partition", "offset", "key", "attempts", "error", "retried"):
            table.add_column(column)
        for r in rows:
            table.add_row(
                str(r["id"]),
                r["topic"],
                str(r["partition"]),
                str(r["offset"]),
                r["key"] or "",
                str(r["attempts"]),
                (r["error"] or "")[:80],
                str(r["retried_at"] or ""),
            )
        console.print(table)
        return 0
    retried = dlq.retry_dead_letters(drain, ids=args.ids or None)
    console.print(
        f"re-produced {retried:,} dead letters to their level topics; they drain in the next runs"
    )
    return 0


# ---------------------------------------------------------------- wiring


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
    )


def _levels(value: str) -> list[int]:
    try:
        return [int(part) for part in value.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"levels are numbers, like '2' or '0,1': got {value!r}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drainer", description="Drain Kafka backlogs by priority, exactly once."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(
        name: str, func: Callable[[argparse.Namespace], int], help_text: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    p = add("services", cmd_services, "local Kafka and Postgres for development")
    p.add_argument("action", choices=["up", "down", "status"])

    p = add("topics", cmd_topics, "create a drain's level topics")
    p.add_argument("action", choices=["create"])
    p.add_argument("drain")

    p = add(
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
    p.add_argument("--stdin", action="store_true", help="read JSON lines from stdin instead")

    for name, func, help_text in (
        ("plan", cmd_plan, "dry run: the allocation of the next run, per level and partition"),
        ("run", cmd_run, "one run of a drain, without Dagster"),
    ):
        p = add(name, func, help_text)
        p.add_argument("drain")
        p.add_argument("--levels", type=_levels, help="only these levels (a backfill), e.g. '0,2'")
        p.add_argument("--json", action="store_true")
        if name == "run":
            p.add_argument(
                "--wait",
                type=float,
                default=0.0,
                metavar="SECONDS",
                help="wait this long for a running run of the drain",
            )

    p = add(
        "status",
        cmd_status,
        "backlog per level and partition, recent runs, fill ratios, burst state",
    )
    p.add_argument("drain")
    p.add_argument("--recent", type=int, default=10)
    p.add_argument("--json", action="store_true")

    p = add(
        "rewind", cmd_rewind, "move a level's committed offsets to an offset or a time (audited)"
    )
    p.add_argument("drain")
    p.add_argument("--level", type=int, required=True)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to-offset", type=int, help="offset to resume from (clamped to what Kafka has)"
    )
    target.add_argument("--to-time", help="ISO time: resume from the first record at or after it")
    p.add_argument("--partitions", type=int, nargs="*", help="only these partitions")
    p.add_argument("--reason", help="why, for the audit trail")

    p = add("dlq", cmd_dlq, "dead letters: list them, or retry them by re-producing to their level")
    p.add_argument("action", choices=["list", "retry"])
    p.add_argument("drain")
    p.add_argument("--ids", type=int, nargs="*", help="retry only these dead letter ids")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--all", action="store_true", help="list retried ones too")
    p.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=err_console, show_path=False)],
    )
    for noisy in ("py4j", "sqlalchemy", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from sqlalchemy.exc import OperationalError

    try:
        return args.func(args)
    except _user_errors() as err:
        err_console.print(f"[red]drainer:[/] {err}")
        return 2
    except OperationalError as err:
        err_console.print(
            f"[red]drainer:[/] Postgres stopped answering ({err.orig}). Nothing was committed: "
            "an interrupted run is resumed with the same ranges by the next `drainer run`."
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
