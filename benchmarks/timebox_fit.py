"""Do time-boxed runs fit their slot? (issue 19.2, `run_seconds`)

    .venv/bin/python benchmarks/timebox_fit.py [--run-seconds 10] [--runs 15]
                                               [--records 3000000] [--budget 1500000]

One fresh drain (3 levels x 4 partitions, dataframe mode, by default one sink row per record,
so a run's time grows with its records as a real drain's does) with
`run_seconds` set and `budget` as the cap, a backlog topped up to at least the cap before every
run (so every run has more records waiting than its budget), then
`--runs` consecutive `drainer run <drain> --json` processes (the real CLI and lifecycle, the
real Kafka, Postgres and Spark Connect). Per run it reports the budget the run used
(`runs.budget`) and why (the throughput estimate the plan saw, `run_budget`), the records it
drained, its slot (`runs.slot_s`: from the lease through commit, mirror and upkeep, what
`run_seconds` aims at), its pre-commit `duration_s`, and the process's wall time (the slot
plus process start, outside the slot by design). Summary: the share of runs within
`run_seconds` after the first (which has no history and uses the cap), and the relative
distance of each run's slot from `run_seconds`, to show how the estimate converges.

Writes benchmarks/out/timebox_fit.json; the topics and the sink table are dropped at the end. The machine's load average is recorded per run: on a
shared machine the rate moves with the load, and so does the fit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DRAINER = Path(sys.executable).with_name("drainer")


def _run_row(engine: Any, run_id: int) -> dict[str, Any]:
    from sqlalchemy import text

    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT r.budget, r.duration_s, r.slot_s, sum(rl.drained) AS drained "
                "FROM runs r JOIN run_levels rl ON rl.run_id = r.id WHERE r.id = :r "
                "GROUP BY r.id"
            ),
            {"r": run_id},
        ).one()
    return dict(row._mapping)


def fit(drain: Any, runs: int, backlog: int, top_up: int) -> dict[str, Any]:
    """`runs` CLI runs of `drain` (current in DRAINER_CONFIG, `backlog` records waiting); their
    budgets and times. Before a run, a backlog below `top_up` gets `top_up` more records, so
    no run is short of records (the producing is outside the runs' slots)."""
    from common import produce

    from drainer.lifecycle.budgets import time_box
    from tests.support.stack import get_engine

    engine = get_engine()
    levels = list(range(drain.levels))
    rows: list[dict[str, Any]] = []
    for i in range(runs):
        if backlog < top_up:
            produce(drain, top_up)
            backlog += top_up
        box = time_box(engine, drain, levels)  # what the run's plan will see (same history)
        assert box is not None
        started = time.perf_counter()
        done = subprocess.run(
            [str(DRAINER), "run", drain.name, "--json"],
            capture_output=True,
            text=True,
            timeout=1800,
            check=True,
        )
        wall = time.perf_counter() - started
        result = json.loads(done.stdout)
        stored = _run_row(engine, result["run_id"])
        row = {
            "run": i + 1,
            "run_id": result["run_id"],
            "budget": stored["budget"],
            "estimate_records_per_s": None
            if box.records_per_s is None
            else round(box.records_per_s, 1),
            "reason": box.reason,
            "drained": int(stored["drained"]),
            "slot_s": stored["slot_s"],
            "duration_s": round(stored["duration_s"], 3),
            "process_s": round(wall, 3),
            "phases": result.get("phases", {}),
            "load_1m": round(os.getloadavg()[0], 2),
        }
        assert row["budget"] == box.budget, (row, box)
        assert row["drained"] == row["budget"], "the backlog ran short: raise --records"
        backlog -= row["drained"]
        rows.append(row)
        print(
            f"run {row['run']:2d}: budget {row['budget']:>7,} drained {row['drained']:>7,} "
            f"slot {row['slot_s']:6.2f} s (pre-commit {row['duration_s']:6.2f} s, process "
            f"{row['process_s']:6.2f} s, upkeep {row['phases'].get('upkeep', 0):5.2f} s) "
            f"load {row['load_1m']:5.2f}  {row['reason']}",
            flush=True,
        )
    return {"rows": rows}


def summarize(rows: list[dict[str, Any]], run_seconds: float) -> dict[str, Any]:
    """Share of runs in their slot after the first, and how far each run was from the slot."""
    after_first = rows[1:]
    within = [r for r in after_first if r["slot_s"] <= run_seconds]
    within_10 = [r for r in after_first if r["slot_s"] <= run_seconds * 1.1]
    last5 = [r["slot_s"] for r in rows[-5:]]
    return {
        "run_seconds": run_seconds,
        "runs": len(rows),
        "first_run": {k: rows[0][k] for k in ("budget", "drained", "slot_s")},
        "within_slot_after_first": f"{len(within)}/{len(after_first)}",
        "within_slot_plus_10pct_after_first": f"{len(within_10)}/{len(after_first)}",
        "slot_error_pct": [round(100 * (r["slot_s"] / run_seconds - 1), 1) for r in rows],
        "last5_slot_s": {"min": min(last5), "max": max(last5)},
        "process_minus_slot_s_median": sorted(r["process_s"] - r["slot_s"] for r in rows)[
            len(rows) // 2
        ],
        "load_1m": {"min": min(r["load_1m"] for r in rows), "max": max(r["load_1m"] for r in rows)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--records", type=int, default=3_000_000, help="the first backlog")
    parser.add_argument("--budget", type=int, default=1_500_000, help="the cap (first run)")
    parser.add_argument("--processor", default="spark_jobs.examples:one_row_per_record")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import OUT, fresh_drain, produce
    from sqlalchemy import text

    from tests.support.drains import delete_topics
    from tests.support.stack import get_engine

    drain = fresh_drain(
        args.budget,
        levels=3,
        partitions=4,
        run_seconds=args.run_seconds,
        mode="dataframe",
        processor=args.processor,
    )
    try:
        t0 = time.monotonic()
        produce(drain, args.records)
        print(f"drain {drain.name}: {args.records:,} records in {time.monotonic() - t0:.0f} s")
        rows = fit(drain, args.runs, args.records, args.budget)["rows"]
    finally:
        delete_topics(drain)
        with get_engine().begin() as conn:  # its rows are only this benchmark's load
            conn.execute(text(f'DROP TABLE IF EXISTS "{drain.sink.table}"'))
    summary = summarize(rows, args.run_seconds)
    report = {"args": vars(args), "drain": drain.name, "summary": summary, "rows": rows}
    (OUT / "timebox_fit.json").write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
