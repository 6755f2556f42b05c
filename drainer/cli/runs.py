"""`drainer plan` (the next run's allocation, a dry run) and `drainer run` (one run)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from drainer.cli.args import add_command, levels
from drainer.cli.output import console, err_console, print_table
from drainer.config import DrainConfig, get_drain
from drainer.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    for name, func, help_text in (
        ("plan", cmd_plan, "dry run: the allocation of the next run, per level and partition"),
        ("run", cmd_run, "one run of a drain, without Dagster"),
    ):
        p = add_command(sub, name, func, help_text)
        p.add_argument("drain")
        p.add_argument("--levels", type=levels, help="only these levels (a backfill), e.g. '0,2'")
        p.add_argument("--json", action="store_true")
        if name == "run":
            p.add_argument(
                "--wait",
                type=float,
                default=0.0,
                metavar="SECONDS",
                help="wait this long for a running run of the drain",
            )


def cmd_plan(args: argparse.Namespace) -> int:
    from drainer.planning import plan_next_run
    from drainer.store import get_engine, runs

    drain = get_drain(args.drain)
    engine = get_engine()
    with engine.connect() as conn:
        pending = runs.open_run(conn, drain.name)
    if pending is not None:
        return _show_open_run(drain, pending, args.json)
    planned = plan_next_run(engine, drain, args.levels)
    if args.json:
        print(json.dumps(plan_json(drain, planned), indent=2))
        return 0
    plan = planned.plan
    level_plans = sorted(plan.levels.values(), key=lambda lp: -lp.level)
    print_table(
        f"next run of {drain.name}: budget {drain.budget:,}, levels {planned.levels}",
        ["level", "reserved", "burst", "allocated", "backlog", "planned"],
        [
            [str(lp.level), lp.reserved, lp.burst, lp.allocated, lp.backlog, lp.planned]
            for lp in level_plans
        ],
        total=["total", "", "", "", sum(lp.backlog for lp in level_plans), plan.total_planned],
    )
    _print_ranges("ranges", [(drain.level_topic(r.level), r) for r in plan.ranges])
    if plan.held_back:
        console.print(f"held back by event-time alignment (max_gap): {plan.held_back}")
    return 0


def _print_ranges(title: str, ranges: list[tuple[str, Any]]) -> None:
    print_table(
        title,
        ["topic", "partition", "start", "end", "records"],
        [[topic, str(r.partition), r.start, r.end, r.records] for topic, r in ranges],
    )


def _show_open_run(drain: DrainConfig, run: Any, as_json: bool) -> int:
    """The next run resumes this uncommitted plan, so that is what `plan` must show."""
    note = (
        f"run {run.id} of {drain.name} is {run.status} after {run.attempts} attempt(s): "
        "the next run resumes it with these same ranges"
    )
    if as_json:
        ranges = [vars(r) for r in run.ranges]
        body = {
            "drain": drain.name,
            "resumes_run": run.id,
            "status": run.status,
            "levels": run.levels,
            "ranges": ranges,
            "total_planned": sum(r["records"] for r in ranges),
            "note": note,
        }
        print(json.dumps(body, indent=2))
        return 0
    console.print(f"[yellow]{note}[/]")
    _print_ranges(f"ranges of run {run.id}", [(r.topic, r) for r in run.ranges])
    return 0


def plan_json(drain: DrainConfig, planned: Any) -> dict[str, Any]:
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
    from drainer.run import drain_once

    if args.executor is None:
        raise ConfigError(
            "this entry point has no Spark executor: use the `drainer` command "
            "(spark_jobs.cli), or call spark_jobs.drain_job.run from Python"
        )
    drain = get_drain(args.drain)
    execute = args.executor()
    with console.status(f"running drain {drain.name} on Spark…"):
        result = drain_once(drain, execute, levels=args.levels, trigger="cli", wait_s=args.wait)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
        return 0
    print_run_table(result)
    for warning in result.warnings:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    return 0


def print_run_table(result: Any) -> None:
    print_table(
        f"run {result.run_id} of {result.drain}" + (" (resumed)" if result.resumed else ""),
        [
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
        ],
        [
            [
                str(lv.level),
                lv.reserved,
                f"{lv.burst:+,}",
                lv.planned,
                lv.drained,
                lv.failed,
                lv.dead_lettered,
                float(lv.fill_ratio),
                lv.backlog_before,
                lv.backlog_after,
            ]
            for lv in result.levels
        ],
        total=["total", "", "", sum(lv.planned for lv in result.levels), result.drained],
    )
    console.print(
        f"{result.drained:,} records in {result.duration_s:.1f} s; "
        f"{result.published_rows:,} sink rows published"
    )
