"""How a static priority backlog drains, run by run, with and without backlog awareness (issue 3).

    .venv/bin/python benchmarks/priority_drain.py [--records-per-level 100000] [--budget 10000]

Two scenarios, each on a fresh drain (its own topics, groups, sink table) on the real stack:
a backlog of `levels` x `records-per-level` records, then real runs
(`spark_jobs.drain_job.run`, dataframe mode, the `time_buckets` processor) until every level
is empty:

  history_only   backlog_aware: false — reserved shares plus burst from history only
  default        the defaults (backlog_aware: true, history_window 6, maxout_threshold 4)

Writes per-run, per-level numbers to benchmarks/out/priority_drain_<scenario>.csv, a plot of
each level's remaining backlog over runs to benchmarks/out/priority_drain.png (copied to
benchmarks/priority_drain.png for the README), and a summary JSON. It then checks two claims
of the default scenario and exits 1 if either fails:
  1. every run that started with a total backlog >= budget drained exactly the budget;
  2. the highest level empties first (levels empty in order, highest to lowest).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from drainer.settings import load_settings

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
SCENARIOS = {"history_only": {"backlog_aware": False}, "default": {}}
FIELDS = [
    "scenario",
    "run",
    "run_id",
    "duration_s",
    "level",
    "reserved",
    "burst",
    "allocated",
    "backlog_before",
    "planned",
    "drained",
    "fill_ratio",
    "backlog_after",
    "run_drained",
    "run_utilization",
]


def make_drain(args: argparse.Namespace, scenario: str, config_dir: Path):
    """A fresh drain for one scenario; current in DRAINER_CONFIG so `drainer status` sees it."""
    from common import created_drain

    from drainer.settings import set_config_path

    drain, path = created_drain(
        config_dir,
        prefix=f"bench_prio_{scenario}",
        levels=args.levels,
        partitions=args.partitions,
        budget=args.budget,
        mode="dataframe",
        processor="spark_jobs.examples:time_buckets",
        **SCENARIOS[scenario],
    )
    set_config_path(path)  # current for the rest of this benchmark process
    return drain


def produce_backlog(drain, records_per_level: int) -> None:
    from drainer.kafka.producer import synthetic_records
    from tests.support.stack import produce_records

    for level in range(drain.levels):
        sent = produce_records(
            drain,
            synthetic_records(records_per_level, keys=1000, value_size=100, seed=level),
            level=level,
        )
        assert sent == records_per_level, (level, sent)


def run_scenario(args: argparse.Namespace, scenario: str, config_dir: Path) -> dict:
    from spark_jobs import drain_job

    drain = make_drain(args, scenario, config_dir)
    started = time.monotonic()
    produce_backlog(drain, args.records_per_level)
    produce_s = time.monotonic() - started
    print(
        f"\n[{scenario}] drain {drain.name}: {args.levels} levels x "
        f"{args.records_per_level:,} records, budget {args.budget:,} "
        f"(produced in {produce_s:.1f} s)",
        flush=True,
    )
    remaining = {level: args.records_per_level for level in range(args.levels)}
    rows: list[dict] = []
    runs: list[dict] = []
    run = 0
    drain_started = time.monotonic()
    while sum(remaining.values()) > 0:
        if args.max_runs and run >= args.max_runs:
            print(f"[{scenario}] stopped at --max-runs {args.max_runs} with backlog {remaining}")
            break
        run += 1
        result = drain_job.run(drain, trigger="benchmark", settings=load_settings())
        by_level = {lv.level: lv for lv in result.levels}
        total_before = sum(lv.backlog_before for lv in result.levels)
        runs.append(
            {
                "run": run,
                "drained": result.drained,
                "backlog_before": total_before,
                "utilization": result.drained / args.budget,
                "duration_s": result.duration_s,
            }
        )
        for level in sorted(by_level, reverse=True):
            lv = by_level[level]
            if lv.backlog_before != remaining[level]:
                raise RuntimeError(f"run {run} level {level}: backlog {lv.backlog_before}")
            remaining[level] = lv.backlog_after
            rows.append(
                {
                    "scenario": scenario,
                    "run": run,
                    "run_id": result.run_id,
                    "duration_s": round(result.duration_s, 3),
                    "level": level,
                    "reserved": lv.reserved,
                    "burst": lv.burst,
                    "allocated": lv.allocated,
                    "backlog_before": lv.backlog_before,
                    "planned": lv.planned,
                    "drained": lv.drained,
                    "fill_ratio": round(lv.fill_ratio, 4),
                    "backlog_after": lv.backlog_after,
                    "run_drained": result.drained,
                    "run_utilization": round(result.drained / args.budget, 4),
                }
            )
        line = "  ".join(
            f"L{lv}: {by_level[lv].drained:>6,} ({by_level[lv].burst:+,})"
            for lv in sorted(by_level, reverse=True)
        )
        print(
            f"[{scenario}] run {run:>3}: {line}  total {result.drained:>6,} "
            f"({result.drained / args.budget:6.1%})  left {sum(remaining.values()):>7,}  "
            f"{result.duration_s:4.1f} s",
            flush=True,
        )
        if result.drained == 0 and sum(remaining.values()) > 0 and not args.allow_idle:
            raise RuntimeError(f"[{scenario}] run {run} drained nothing with backlog {remaining}")

    csv_path = OUT / f"priority_drain_{scenario}.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    empty_at = {}
    for level in range(args.levels):
        emptied = [r["run"] for r in rows if r["level"] == level and r["backlog_after"] == 0]
        empty_at[level] = min(emptied) if emptied else None
    full_runs = [r for r in runs if r["backlog_before"] >= args.budget]
    return {
        "scenario": scenario,
        "drain": drain.name,
        "settings": SCENARIOS[scenario] or {"backlog_aware": True},
        "runs": len(runs),
        "empty_at_run": empty_at,
        "mean_utilization": sum(r["utilization"] for r in runs) / len(runs) if runs else 0.0,
        "full_backlog_runs": len(full_runs),
        "full_backlog_runs_at_100pct": sum(1 for r in full_runs if r["drained"] == args.budget),
        "min_utilization_full_backlog": min((r["utilization"] for r in full_runs), default=None),
        "drain_wall_s": round(time.monotonic() - drain_started, 1),
        "mean_run_s": round(sum(r["duration_s"] for r in runs) / len(runs), 2) if runs else 0.0,
        "csv": str(csv_path.relative_to(HERE.parent)),
        "per_run": runs,
        "rows": rows,
    }


def plot(results: list[dict], args: argparse.Namespace, path: Path) -> None:
    """Top: each level's remaining backlog after every run. Bottom: what each run drained,
    stacked by level, against the budget (a gap under the dashed line is idle budget)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    colors = {2: "#d62728", 1: "#ff7f0e", 0: "#1f77b4"}
    thousands = FuncFormatter(lambda v, _: f"{v / 1000:g}k" if v else "0")
    fig, grid = plt.subplots(
        2,
        len(results),
        figsize=(6.4 * len(results), 7.2),
        sharex=True,
        sharey="row",
        gridspec_kw={"height_ratios": [3, 2]},
        squeeze=False,
    )
    longest = max(r["runs"] for r in results)
    levels = sorted(range(args.levels), reverse=True)
    for column, result in enumerate(results):
        top, bottom = grid[0][column], grid[1][column]
        base = [0] * result["runs"]
        for level in levels:
            mine = [row for row in result["rows"] if row["level"] == level]
            color = colors.get(level)
            at = result["empty_at_run"][level]
            label = f"level {level}" + (f": empty after run {at}" if at else ": not empty")
            top.plot(
                [0] + [row["run"] for row in mine],
                [args.records_per_level] + [row["backlog_after"] for row in mine],
                marker="o",
                markersize=2.5,
                linewidth=1.6,
                color=color,
                label=label,
            )
            if at:
                top.axvline(at, color=color, linestyle=":", linewidth=1, alpha=0.8)
            drained = [row["drained"] for row in mine]
            bottom.bar(
                [row["run"] for row in mine],
                drained,
                bottom=base,
                width=0.8,
                color=color,
                label=f"level {level}",
            )
            base = [b + d for b, d in zip(base, drained, strict=True)]
        bottom.axhline(args.budget, color="black", linestyle="--", linewidth=1, label="budget")
        title = {
            "history_only": "backlog awareness off (history burst only)",
            "default": "defaults (backlog-aware)",
        }[result["scenario"]]
        top.set_title(
            f"{title}\n{result['runs']} runs until empty, mean budget utilization "
            f"{result['mean_utilization']:.1%}",
            fontsize=10,
        )
        top.grid(True, alpha=0.3)
        top.legend(fontsize=8, loc="upper right")
        bottom.grid(True, axis="y", alpha=0.3)
        bottom.set_xlabel("run")
        bottom.set_xlim(0, longest + 1)
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
        bottom.legend(fontsize=7, loc="upper right", ncol=args.levels + 1)
    grid[0][0].set_ylabel("remaining backlog (records)")
    grid[1][0].set_ylabel("drained in the run")
    grid[0][0].yaxis.set_major_formatter(thousands)
    grid[1][0].yaxis.set_major_formatter(thousands)
    grid[1][0].set_ylim(0, args.budget * 1.3)
    fig.suptitle(
        f"priority drain: {args.levels} levels x {args.records_per_level:,} records, "
        f"budget {args.budget:,} per run (exponential shares)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check_claims(result: dict, levels: int) -> list[tuple[str, bool, str]]:
    full, at_100 = result["full_backlog_runs"], result["full_backlog_runs_at_100pct"]
    order = [result["empty_at_run"][level] for level in reversed(range(levels))]
    ordered = all(at is not None for at in order) and all(
        a < b for a, b in zip(order, order[1:], strict=False)
    )
    return [
        (
            "every run with total backlog >= budget drained the whole budget",
            full > 0 and at_100 == full,
            f"{at_100} of {full} such runs at 100%",
        ),
        (
            "the highest level empties first (then each lower level in turn)",
            ordered,
            "empty after runs "
            + ", ".join(
                f"level {lv}: {result['empty_at_run'][lv]}" for lv in reversed(range(levels))
            ),
        ),
    ]


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}"


def markdown_table(results: list[dict], levels: int) -> str:
    head = "| scenario | runs | " + " | ".join(
        f"level {lv} empty after run" for lv in reversed(range(levels))
    )
    head += " | mean utilization | runs with backlog ≥ budget at 100% | mean run |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        lines.append(
            f"| {r['scenario']} | {r['runs']} | "
            + " | ".join(str(r["empty_at_run"][lv]) for lv in reversed(range(levels)))
            + f" | {r['mean_utilization']:.1%} | {r['full_backlog_runs_at_100pct']} of "
            f"{r['full_backlog_runs']} | {r['mean_run_s']:.1f} s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records-per-level", type=int, default=100_000)
    parser.add_argument("--budget", type=int, default=10_000)
    parser.add_argument("--levels", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4, help="partitions per level topic")
    parser.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument(
        "--max-runs",
        type=int,
        default=0,
        help="stop a scenario after this many runs (0 = run until empty, the default)",
    )
    parser.add_argument(
        "--allow-idle",
        action="store_true",
        help="keep going when a run drains nothing although records wait (default: stop)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("DRAINER_SPARK_LOG_LEVEL", "ERROR")
    OUT.mkdir(parents=True, exist_ok=True)

    from drainer import services
    from spark_jobs.session import get_spark

    services.up(load_settings(), echo=lambda *_: None)
    get_spark(load_settings()).range(1).count()  # warm the session outside the timings

    started = datetime.now(UTC)
    results = []
    with tempfile.TemporaryDirectory(prefix="priority_drain_") as config_dir:
        for scenario in args.scenarios:
            results.append(run_scenario(args, scenario, Path(config_dir)))

    png = OUT / "priority_drain.png"
    plot(results, args, png)
    shutil.copyfile(png, HERE / "priority_drain.png")

    print("\n" + markdown_table(results, args.levels))
    failed = False
    claims = {}
    for result in results:
        if result["scenario"] != "default":
            continue
        for claim, ok, detail in check_claims(result, args.levels):
            failed |= not ok
            claims[claim] = {"ok": ok, "detail": detail}
            print(f"[{'PASS' if ok else 'FAIL'}] default: {claim} — {detail}")
    for result in results:
        if result["scenario"] == "default":
            continue
        for claim, ok, detail in check_claims(result, args.levels):
            print(f"[info] {result['scenario']}: {claim}? {'yes' if ok else 'no'} — {detail}")

    summary = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "python": sys.version.split()[0],
        "records_per_level": args.records_per_level,
        "budget": args.budget,
        "levels": args.levels,
        "partitions": args.partitions,
        "max_runs": args.max_runs or None,
        "claims_default": claims,
        "scenarios": [{k: v for k, v in r.items() if k != "rows"} for r in results],
    }
    (OUT / "priority_drain_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"\n{summary['date']} on {summary['machine']}")
    print(f"wrote {png.relative_to(HERE.parent)}, benchmarks/priority_drain.png, CSVs, summary")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
