"""`drainer simulate <drain>`: replay arrival traces through the drain's allocation policies.

Pure computation (`drainer.allocation.simulate`): no Kafka, no database; the drain's settings
(levels, budget, distributor, history window, backlog_aware, max_wait, run_seconds,
budget_bytes) come from the drains file; the simulated run time from `--fixed-s`,
`--records-per-s`, `--bytes-per-s` and `--record-bytes`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from drainer.allocation.simulate import (
    COLUMNS,
    POLICIES,
    Drain,
    Throughput,
    compare,
    table,
)
from drainer.allocation.traces import TRACES, builtin_trace, parse_trace
from drainer.cli.args import Subcommands, add_command, get_drain
from drainer.cli.output import human_duration, print_table
from drainer.errors import ConfigError

if TYPE_CHECKING:
    from drainer.config import DrainConfig

DEFAULT_MAX_WAIT = "30m"


def register(sub: Subcommands) -> None:
    p = add_command(
        sub,
        "simulate",
        cmd_simulate,
        "replay arrival traces through strict priority, the seed policy, proportional shares "
        "and the drain's own policy with and without max_wait; report waits per level",
    )
    p.add_argument("drain")
    p.add_argument(
        "--trace",
        action="append",
        metavar="NAME|CSV",
        help=f"a built-in trace ({', '.join(TRACES)}; all of them by default) or a CSV file "
        "with a header `minute,0,1,...` of arrivals per minute and level; repeatable",
    )
    p.add_argument(
        "--interval", type=int, default=5, metavar="MINUTES", help="minutes between runs"
    )
    p.add_argument(
        "--max-wait",
        metavar="DURATION",
        help=f"max_wait for the `drainer + max_wait` policy when the drain sets none "
        f"(default {DEFAULT_MAX_WAIT})",
    )
    default = Throughput()
    p.add_argument(
        "--fixed-s",
        type=float,
        default=default.fixed_s,
        help="simulated seconds a run costs whatever it reads (default %(default)g)",
    )
    p.add_argument(
        "--records-per-s",
        type=float,
        default=default.records_per_s,
        help="simulated records read per second (default %(default)g)",
    )
    p.add_argument(
        "--bytes-per-s",
        type=float,
        default=default.bytes_per_s,
        help="simulated key+value bytes read per second (default %(default)g)",
    )
    p.add_argument(
        "--record-bytes",
        default=",".join(f"{size:g}" for size in default.record_bytes),
        metavar="SIZES",
        help="key+value bytes per record of each level: lowest level first (2000,1000,500; "
        "the last one stands for the levels above it) or level:bytes pairs (2:100,0:10000; "
        "a level not named has the size of the nearest named one below it, else of the lowest "
        "named one) "
        "(default %(default)s)",
    )
    p.add_argument("--json", action="store_true")


def simulated_drain(drain: DrainConfig, max_wait: str | None = None) -> Drain:
    """The drain's allocation settings; its max_wait, else `max_wait` for every level."""
    try:
        from drainer.config.units import duration_ms

        fallback = duration_ms(max_wait or DEFAULT_MAX_WAIT)
    except ValueError as err:
        raise ConfigError(f"--max-wait {err}") from None
    return Drain(
        levels=drain.levels,
        budget=drain.budget,
        distributor=drain.distributor,
        window=drain.history_window,
        maxout_threshold=drain.maxout_threshold,
        max_wait_ms=drain.max_wait_ms or dict.fromkeys(range(drain.levels), fallback),
        backlog_aware=drain.backlog_aware,
        run_seconds=drain.run_seconds,
        budget_bytes=drain.budget_bytes,
    )


def throughput(args: argparse.Namespace, levels: int) -> Throughput:
    """The simulated run time from the command line's throughput flags."""
    try:
        sizes = Throughput.sizes(args.record_bytes, levels)
        return Throughput(args.fixed_s, args.records_per_s, args.bytes_per_s, sizes)
    except ValueError as err:
        raise ConfigError(f"throughput: {err}") from None


def cmd_simulate(args: argparse.Namespace) -> int:
    drain = simulated_drain(get_drain(args.drain, args.settings), args.max_wait)
    speed = throughput(args, drain.levels)
    if args.interval < 1:
        raise ConfigError(f"--interval {args.interval}: runs are at least 1 minute apart")
    report = {}
    for name in args.trace or TRACES:
        try:
            if name in TRACES:
                trace = builtin_trace(name, drain, args.interval)
            else:
                trace = parse_trace(Path(name).read_text(), drain.levels, name)
        except FileNotFoundError:
            raise ConfigError(
                f"trace {name!r} is neither a built-in trace ({', '.join(TRACES)}) nor a file"
            ) from None
        except ValueError as err:
            raise ConfigError(str(err)) from None
        results = compare(drain, trace, args.interval, throughput=speed)
        report[name] = results
        if not args.json:
            limits = ", ".join(
                f"level {level} {human_duration(ms)}"
                for level, ms in sorted((drain.max_wait_ms or {}).items())
            )
            budgets = f"budget {drain.budget:,}"
            if drain.run_seconds is not None:
                budgets += f", run_seconds {drain.run_seconds:g}"
            if drain.budget_bytes is not None:
                budgets += f", budget_bytes {drain.budget_bytes:,}"
            print_table(
                f"{args.drain}: trace {name}, a run every {args.interval} min, {budgets}, "
                f"max_wait {limits}; runs take {speed.fixed_s:g} s + records / "
                f"{speed.records_per_s:g} + bytes / {speed.bytes_per_s:g}",
                COLUMNS,
                table(results),
            )
    if args.json:
        body = {name: [asdict(r) for r in results] for name, results in report.items()}
        print(json.dumps({"drain": args.drain, "policies": list(POLICIES), "traces": body}))
    return 0
