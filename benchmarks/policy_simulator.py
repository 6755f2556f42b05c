"""The allocation policies side by side on arrival traces, through the real allocation code.

  .venv/bin/python benchmarks/policy_simulator.py    # defaults: see --help

A pure simulation (`drainer.allocation.simulate`): 3 levels, one partition each, a run due every
`--interval` minutes with a budget of `--budget` records; the built-in traces are scaled to that
capacity. A run takes `--fixed-s` + records / `--records-per-s` + bytes / `--bytes-per-s`
simulated seconds, at `--record-bytes` per record of each level (lowest first). Compared with
the fixed budget: strict priority, the seed paper's policy (reserved shares + burst from
history, no backlog awareness), plain proportional shares, drainer's policy, and drainer's with
`max_wait` on every level; then strict, drainer and drainer+max_wait again with time-boxed
budgets (`--run-seconds`, timebox.py fed with the simulated runs) and with a byte budget
(`--budget-bytes`); last drainer+max_wait with `max_wait` on the top level only
(`--top-max-wait`), the configuration that keeps the top level near strict priority in
overload. Prints a Markdown table (the one in docs/allocation.md) and writes the raw
results to benchmarks/out/policy_simulator.json.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

from drainer.allocation.simulate import TRACES, Drain, Throughput, builtin_trace, compare
from drainer.config.units import duration_ms, size_bytes

OUT = Path(__file__).resolve().parent / "out"
ALL = ["strict", "seed", "proportional", "drainer", "drainer+max_wait"]
SOME = ["strict", "drainer", "drainer+max_wait"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=7000)
    parser.add_argument("--interval", type=int, default=5, help="minutes between runs")
    parser.add_argument("--max-wait", default="30m", help="for the drainer+max_wait policy")
    parser.add_argument("--run-seconds", type=float, default=200.0)
    parser.add_argument("--budget-bytes", default="7MB")
    parser.add_argument("--fixed-s", type=float, default=20.0)
    parser.add_argument("--records-per-s", type=float, default=50.0)
    parser.add_argument("--bytes-per-s", type=float, default=100_000.0)
    parser.add_argument(
        "--record-bytes", default="2000,1000,500", help="levels 0,1,2 (or level:bytes pairs)"
    )
    parser.add_argument("--top-max-wait", default="10m", help="max_wait of level 2 alone")
    args = parser.parse_args()
    limit = duration_ms(args.max_wait)
    drain = Drain(levels=3, budget=args.budget, max_wait_ms=dict.fromkeys(range(3), limit))
    speed = Throughput(
        args.fixed_s,
        args.records_per_s,
        args.bytes_per_s,
        Throughput.sizes(args.record_bytes, 3),
    )
    variants = [
        ("budget", drain, ALL),
        (f"run_seconds {args.run_seconds:g}", replace(drain, run_seconds=args.run_seconds), SOME),
        (
            f"budget_bytes {args.budget_bytes}",
            replace(drain, budget_bytes=size_bytes(args.budget_bytes)),
            SOME,
        ),
        (
            f"max_wait {{2: {args.top_max_wait}}}",
            replace(drain, max_wait_ms={2: duration_ms(args.top_max_wait)}),
            ["drainer+max_wait"],
        ),
    ]
    started = time.perf_counter()
    report: dict[str, dict[str, list[dict[str, object]]]] = {}
    print(
        "| trace | budget | policy | p50 wait (min), levels 2 / 1 / 0 | p99 | max "
        "| records past max_wait | runs to empty | utilization | inversion runs "
        "| budget p50 | run s p50 / max | runs over slot |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in TRACES:
        trace = builtin_trace(name, drain, args.interval)
        report[name] = {}
        for label, variant, policies in variants:
            results = compare(variant, trace, args.interval, policies, speed)
            report[name][label] = [asdict(r) for r in results]
            for r in results:
                waits = [
                    " / ".join(f"{getattr(lv, key):g}" for lv in r.levels)
                    for key in ("p50_wait_min", "p99_wait_min", "max_wait_min")
                ]
                past = sum(lv.over_max_wait for lv in r.levels)
                print(
                    f"| {name} | {label} | {r.policy} | {' | '.join(waits)} | {past:,} "
                    f"| {r.runs_to_empty} | {r.utilization:.0%} | {r.inversions} "
                    f"| {r.budget_p50:,} | {r.run_p50_s:g} / {r.run_max_s:g} "
                    f"| {r.over_run_seconds} |"
                )
    elapsed = time.perf_counter() - started
    rows = sum(len(results) for by in report.values() for results in by.values())
    print(f"\n{len(TRACES)} traces, {rows} simulations in {elapsed:.1f} s")
    OUT.mkdir(exist_ok=True)
    (OUT / "policy_simulator.json").write_text(json.dumps(vars(args) | {"traces": report}))


if __name__ == "__main__":
    main()
