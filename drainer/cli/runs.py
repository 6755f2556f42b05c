"""`drainer plan` (the next run's allocation, a dry run) and `drainer run` (one run)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from drainer.cli.args import Subcommands, add_command, get_drain, levels
from drainer.cli.output import console, err_console, human_duration, print_table
from drainer.cli.routed_tables import print_routed_tables
from drainer.errors import ConfigError

if TYPE_CHECKING:
    from drainer.config import DrainConfig


def register(sub: Subcommands) -> None:
    for name, func, help_text in (
        (
            "plan",
            cmd_plan,
            "dry run: the allocation of the next run, per level and partition; "
            "`plan abandon <drain> --reason TEXT` ends an open plan (audited, commits nothing)",
        ),
        ("run", cmd_run, "one run of a drain, without Dagster"),
    ):
        p = add_command(sub, name, func, help_text)
        p.add_argument("drain")
        if name == "plan":
            # `drainer plan abandon <drain>`: a sub-action that keeps `drainer plan <drain>`
            p.add_argument("abandon_drain", nargs="?", metavar="drain", help=argparse.SUPPRESS)
            p.add_argument("--reason", help="plan abandon: why, for the audit trail (required)")
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
    from drainer.kafka.session import KafkaSession
    from drainer.lifecycle.planning import plan_next_run
    from drainer.store import get_engine, retries, runs

    if args.abandon_drain is not None:
        if args.drain != "abandon":
            raise ConfigError(
                f"`drainer plan {args.drain} {args.abandon_drain}`: the only action of `plan` "
                "is `abandon`, as in `drainer plan abandon <drain> --reason TEXT`"
            )
        return cmd_plan_abandon(args)
    if args.reason is not None:
        raise ConfigError("--reason goes with `drainer plan abandon <drain> --reason TEXT`")
    drain = get_drain(args.drain, args.settings)
    if args.checker is not None:  # the processor or handler imports where the run imports it
        args.checker()(drain, args.settings, True)
    engine = get_engine(args.settings.database_url)
    with engine.connect() as conn:
        pending = runs.open_run(conn, drain.name)
    if pending is not None:
        return _show_open_run(drain, pending, args.json)
    with KafkaSession(drain, args.settings) as kafka:
        planned = plan_next_run(engine, drain, kafka, args.levels)
    if args.json:
        print(json.dumps(plan_json(drain, planned), indent=2))
        return 0
    plan = planned.plan
    levels_desc = sorted(plan.levels.values(), key=lambda lp: -lp.level)
    budget = drain.budget if planned.budget is None else planned.budget.budget
    _print_level_tables(
        f"next run of {drain.name}: budget {budget:,}, levels {planned.levels}",
        levels_desc,
        max_wait=drain.max_wait is not None,
    )
    if drain.max_wait is not None:
        print_table(
            "max_wait: records past their wait are served first",
            ["level", "max wait", "oldest record age", "late records", "for max wait"],
            [
                [
                    str(lp.level),
                    human_duration((drain.max_wait_ms or {}).get(lp.level)),
                    human_duration(None if lp.oldest_age_s is None else lp.oldest_age_s * 1000),
                    lp.late,
                    lp.for_max_wait,
                ]
                for lp in levels_desc
            ],
        )
    if planned.budget is not None and (summary := planned.budget.summary()) is not None:
        console.print(summary, highlight=False)
    if drain.budget_bytes is not None:
        print_table(
            "budget_bytes: each level's records within its share of the bytes",
            ["level", "byte cap (records)", "planned", "planned bytes"],
            [[str(lp.level), lp.byte_cap, lp.planned, lp.planned_bytes] for lp in levels_desc],
        )
    _print_ranges("ranges", [(drain.level_topic(r.level), r) for r in plan.ranges])
    for wait in plan.alignment:
        console.print(f"{drain.level_topic(wait.level)}[{wait.partition}] {wait.reason}")
    with engine.connect() as conn:
        waiting = retries.requested_retries(conn, drain.name, planned.levels)
    if waiting:
        console.print(
            f"{waiting:,} dead letters wait for their retry (`drainer dlq retry`): the next run "
            "retries them first, in a run of their own",
            highlight=False,
        )
    return 0


def _print_level_tables(title: str, levels_desc: list[Any], max_wait: bool = False) -> None:
    """Per level: its numbers (`available`: what event-time alignment lets it read), and where
    its planned records come from (its reserved share, the history burst, handed on; with
    `max_wait`, first what it got for its late records)."""
    sources: tuple[str, ...] = ("from_reserved", "from_burst", "handed_on")
    if max_wait:
        sources = ("for_max_wait", *sources)
    for table_title, columns, blank in (
        (title, ("reserved", "burst", "allocated", "backlog", "available", "planned"), 3),
        ("where the planned records come from", sources, 0),
    ):
        sums = [sum(getattr(lp, c) for lp in levels_desc) for c in columns]
        print_table(
            table_title,
            ["level", *(HEADERS.get(c, c.replace("_", " ")) for c in columns)],
            [[str(lp.level), *(getattr(lp, c) for c in columns)] for lp in levels_desc],
            total=["total", *([""] * blank), *sums[blank:]],
        )
    for line in handed_on_lines(levels_desc):
        console.print(line, highlight=False)


HEADERS = {"handed_on": "handed on to it"}


def handed_on_lines(levels_desc: list[Any]) -> list[str]:
    """Who got budget handed on, and from whom: the levels that left part of their
    allocation unused (no backlog, or alignment held them back)."""
    lines = []
    for lp in levels_desc:
        if lp.handed_on <= 0:
            continue
        givers = [
            str(o.level) for o in levels_desc if o.level != lp.level and o.allocated > o.planned
        ]
        source = (
            f"level{'s' if len(givers) > 1 else ''} {', '.join(givers)}" if givers else "others"
        )
        lines.append(
            f"handed on: level {lp.level} got {lp.handed_on:,} of the budget that {source} "
            "could not use"
        )
    return lines


def cmd_plan_abandon(args: argparse.Namespace) -> int:
    from drainer.lifecycle.abandon import abandon_plan

    drain = get_drain(args.abandon_drain, args.settings)
    if args.levels:
        raise ConfigError("`plan abandon` ends the drain's one open plan, whatever its levels")
    finder = args.finder() if args.finder else None
    run = abandon_plan(drain, args.reason or "", args.settings, finder=finder)
    if args.json:
        body = {
            "drain": drain.name,
            "abandoned_run": run.id,
            "status_was": run.status,
            "attempts": run.attempts,
            "ranges": [vars(r) for r in run.ranges],
        }
        print(json.dumps(body, indent=2))
        return 0
    console.print(
        f"abandoned run {run.id} of {drain.name} ({run.status} after {run.attempts} attempt(s)); "
        "nothing was committed, the next run plans afresh (audited in plan_abandons)"
    )
    if run.retries:
        console.print(
            f"its retry of {run.retries:,} dead letters is cancelled: they stay dead letters "
            f"(`drainer dlq retry {drain.name}` requests them again once the cause is fixed)",
            highlight=False,
        )
    _print_ranges(f"ranges of run {run.id}", [(r.topic, r) for r in run.ranges])
    return 0


def _print_ranges(title: str, ranges: list[tuple[str, Any]]) -> None:
    print_table(
        title,
        ["topic", "partition", "start", "end", "records"],
        [[topic, str(r.partition), r.start, r.end, r.records] for topic, r in ranges],
    )


def _show_open_run(drain: DrainConfig, run: Any, as_json: bool) -> int:
    """The next run resumes this uncommitted plan, so that is what `plan` must show."""
    what = (
        f"these same {run.retries:,} dead letters (a retry)" if run.retries else "these same ranges"
    )
    note = (
        f"run {run.id} of {drain.name} is {run.status} after {run.attempts} attempt(s): "
        f"the next run resumes it with {what} (or end it with "
        f"`drainer plan abandon {drain.name} --reason TEXT`)"
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
            "dead_letters_retried": run.retries,
            "note": note,
        }
        print(json.dumps(body, indent=2))
        return 0
    console.print(f"[yellow]{note}[/]")
    _print_ranges(f"ranges of run {run.id}", [(r.topic, r) for r in run.ranges])
    return 0


def plan_json(drain: DrainConfig, planned: Any) -> dict[str, Any]:
    plan = planned.plan
    budget = None if planned.budget is None else planned.budget.as_dict()
    estimate = [lp.planned_bytes for lp in plan.levels.values() if lp.planned_bytes is not None]
    return {
        "drain": drain.name,
        # the record budget this plan was made with: `budget` unless `run_seconds` derived one
        "budget": drain.budget if budget is None else budget["budget"],
        "budget_cap": drain.budget,
        "run_budget": budget,
        "planned_bytes": sum(estimate) if estimate else None,
        "levels": [vars(lp) for lp in sorted(plan.levels.values(), key=lambda lp: -lp.level)],
        "ranges": [{"topic": drain.level_topic(r.level), **vars(r)} for r in plan.ranges],
        "total_planned": plan.total_planned,
        "held_back": [list(x) for x in plan.held_back],
        "alignment": [
            {**vars(w), "behind": list(w.behind), "waits": w.waits, "reason": w.reason}
            for w in plan.alignment
        ],
    }


def cmd_run(args: argparse.Namespace) -> int:
    from drainer.lifecycle.run import drain_once

    if args.executor is None:
        raise ConfigError(
            "this entry point has no Spark executor: use the `drainer` command "
            "(spark_jobs.cli), or call spark_jobs.drain_job.run from Python"
        )
    drain = get_drain(args.drain, args.settings)
    if args.checker is not None:  # the driver's import, before a plan is stored
        args.checker()(drain, args.settings, False)
    execute = args.executor()
    with console.status(f"running drain {drain.name} on Spark…"):
        result = drain_once(
            drain,
            execute,
            levels=args.levels,
            trigger="cli",
            wait_s=args.wait,
            settings=args.settings,
        )
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
        return 0
    if result.finished is not None:  # an open plan, or retried dead letters, went first
        print_first_run(result.finished)
    print_run_table(result)
    for warning in result.warnings:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    return 0


def print_first_run(result: Any) -> None:
    """The run a call carried out before its own plan: retried dead letters (a line), or an
    open plan of other levels (its table)."""
    if result.levels or not (result.retried or result.dead_again):
        print_run_table(result, note="open plan of other levels, finished first")
        return
    again = (
        f", {result.dead_again:,} failed again (`drainer dlq list`)" if result.dead_again else ""
    )
    console.print(
        f"run {result.run_id} of {result.drain}"
        + (" (resumed)" if result.resumed else "")
        + f": {result.retried:,} dead letters retried{again}; "
        f"{result.published_rows:,} sink rows published",
        highlight=False,
    )


def print_run_table(result: Any, note: str | None = None) -> None:
    title = f"run {result.run_id} of {result.drain}" + (" (resumed)" if result.resumed else "")
    print_table(
        title + (f": {note}" if note else ""),
        [
            "level",
            "reserved",
            "burst",
            "planned",
            "drained",
            "failed",
            "dead",
            "lost",
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
                lv.lost_to_retention,
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
    if getattr(result, "columns_added", None):
        console.print(f"columns added: {', '.join(result.columns_added)}", highlight=False)
    print_routed_tables([(result.run_id, result.table_commit, result.table_rows)])
