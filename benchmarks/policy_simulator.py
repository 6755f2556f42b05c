"""The allocation policies side by side on arrival traces, through the real allocation code.

  .venv/bin/python benchmarks/policy_simulator.py          # --budget 7000 --interval 5 --max-wait 30m

A pure simulation (`drainer.allocation.simulate`): 3 levels, one partition each, a run every
`--interval` minutes draining `--budget` records; the built-in traces are scaled to that
capacity. Compared: strict priority, the seed paper's policy (reserved shares + burst from
history, no backlog awareness), plain proportional shares, drainer's policy, and drainer's with
`max_wait` on every level. Prints a Markdown table (the one in docs/allocation.md) and writes
the raw results to benchmarks/out/policy_simulator.json.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

from drainer.allocation.simulate import TRACES, Drain, builtin_trace, compare
from drainer.config.units import duration_ms

OUT = Path(__file__).resolve().parent / "out"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=7000)
    parser.add_argument("--interval", type=int, default=5, help="minutes between runs")
    parser.add_argument("--max-wait", default="30m", help="for the drainer+max_wait policy")
    args = parser.parse_args()
    limit = duration_ms(args.max_wait)
    drain = Drain(levels=3, budget=args.budget, max_wait_ms=dict.fromkeys(range(3), limit))
    started = time.perf_counter()
    report = {}
    print(
        "| trace | policy | p50 wait (min), levels 2 / 1 / 0 | p99 | max "
        "| records past max_wait | runs to empty | utilization | inversion runs |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in TRACES:
        results = compare(drain, builtin_trace(name, drain, args.interval), args.interval)
        report[name] = [asdict(r) for r in results]
        for r in results:
            waits = [
                " / ".join(f"{getattr(lv, key):g}" for lv in r.levels)
                for key in ("p50_wait_min", "p99_wait_min", "max_wait_min")
            ]
            past = sum(lv.over_max_wait for lv in r.levels)
            print(
                f"| {name} | {r.policy} | {' | '.join(waits)} | {past:,} | {r.runs_to_empty} "
                f"| {r.utilization:.0%} | {r.inversions} |"
            )
    elapsed = time.perf_counter() - started
    print(f"\n{len(TRACES)} traces x {len(report[TRACES[0]])} policies in {elapsed:.1f} s")
    OUT.mkdir(exist_ok=True)
    (OUT / "policy_simulator.json").write_text(json.dumps(vars(args) | {"traces": report}))


if __name__ == "__main__":
    main()
