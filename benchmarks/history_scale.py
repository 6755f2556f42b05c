"""Per-run overhead against history length: an empty database vs 100,000 runs of history.

  .venv/bin/python benchmarks/history_scale.py            # --history 100000 --runs 25

Two fresh databases on the local Postgres: `empty` (only the schema) and `full`, filled by
`benchmarks/history_fill.py` with `--history` committed runs of the measured drain (levels,
ranges, retention losses, dead letters, attempt counts) and as many of a neighbour drain whose
3 levels have 1,000 partitions each (its offsets, ranges…). Two identical drains (3 levels x 2
partitions, dataframe mode, one row per record), one per database, then run alternately,
`--runs` times each after one warm-up run each, with 30 new records per level before every
run (which database goes first alternates, so the machine's load falls on both alike). The
drains set `run_seconds` and `budget_bytes` (both far above what a run reads, so every run
drains its 90 records): their plans read the recent throughput and every partition's record
size from history (drainer.store.throughput). `history_days` is set far out, so no run prunes
what the benchmark filled. Reported per database: the medians of the phases a run spends in the
drainer's own state (plan, commit, mirror; Spark is the same work either way and is left out),
the ratio full / empty, the drainer's SQL per run (mean and median), the statements history made slowest, and the
load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter

from common import OUT, fresh_drain
from history_fill import fill_history

from drainer.settings import load_settings

PHASES = ("plan", "commit", "mirror")


def _time_statements(engine, totals: Counter) -> None:
    """Add each statement's seconds to `totals`, keyed by its first 60 characters."""
    from sqlalchemy import event

    @event.listens_for(engine, "before_cursor_execute")
    def before(conn, cursor, statement, parameters, context, executemany):
        conn.info.setdefault("started", []).append(time.perf_counter())

    @event.listens_for(engine, "after_cursor_execute")
    def after(conn, cursor, statement, parameters, context, executemany):
        started = conn.info["started"].pop()
        totals[" ".join(statement.split())[:60]] += time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=25)
    args = parser.parse_args()

    from sqlalchemy import create_engine, text

    from drainer.kafka.producer import synthetic_records
    from drainer.lifecycle.run import drain_once
    from spark_jobs import drain_job
    from tests.support.stack import get_engine, produce_records

    base = load_settings().database_url
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    urls = {}
    for which in ("empty", "full"):
        name = f"drainer_history_scale_{which}"
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        urls[which] = base.rsplit("/", 1)[0] + "/" + name
    drains = {}
    for which in ("empty", "full"):
        os.environ["DRAINER_DATABASE_URL"] = urls[which]
        drains[which] = fresh_drain(
            90,
            levels=3,
            partitions=2,
            history_days=3650,
            run_seconds=600,
            budget_bytes="100MiB",
            processor="spark_jobs.examples:one_row_per_record",
        )
    started = time.perf_counter()
    full = drains["full"]
    with get_engine(urls["full"]).begin() as conn:
        fill_history(conn, full.name, full.topic, 3, args.history, 2, offsets=False)
        fill_history(conn, "neighbour", "neighbour", 3, args.history, 1000)
        sizes = {
            t: conn.scalar(text(f"SELECT count(*) FROM {t}"))
            for t in ("runs", "run_levels", "run_ranges", "partition_offsets", "dead_letters")
        }
    fill_s = time.perf_counter() - started
    print(
        f"filled {sizes} in {fill_s:.0f} s; spark: {drain_job.which_spark(load_settings())}",
        file=sys.stderr,
    )

    sql_s: dict[str, Counter] = {"empty": Counter(), "full": Counter()}
    for which in ("empty", "full"):
        _time_statements(get_engine(urls[which]), sql_s[which])
    seconds: dict[str, list[dict[str, float]]] = {"empty": [], "full": []}
    sql_runs: dict[str, list[float]] = {"empty": [], "full": []}  # each measured run's SQL
    load_before = os.getloadavg()
    for i in range(args.runs + 1):
        for which in ("empty", "full") if i % 2 else ("full", "empty"):
            drain = drains[which]
            os.environ["DRAINER_DATABASE_URL"] = urls[which]
            for level in range(drain.levels):
                records = list(synthetic_records(30, keys=10, seed=i * 10 + level))
                produce_records(drain, records, level=level, partition=i % drain.partitions)
            sql_before = sum(sql_s[which].values())
            result = drain_once(
                drain, drain_job.execute, None, "benchmark", settings=load_settings()
            )
            assert result.drained == 90 and not result.warnings, (result.drained, result.warnings)
            if i:  # the first run of each warms its session and caches
                seconds[which].append(result.phases)
                sql_runs[which].append(sum(sql_s[which].values()) - sql_before)
            else:
                sql_s[which].clear()
    report: dict = {
        "history_runs": args.history,
        "runs": args.runs,
        "rows": sizes,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    for which, phases in seconds.items():
        report[which] = {
            p: round(statistics.median(ph[p] for ph in phases), 4) for p in (*PHASES, "upkeep")
        }
        report[which]["state_s"] = round(
            statistics.median(sum(ph[p] for p in PHASES) for ph in phases), 4
        )
    report["ratio"] = round(report["full"]["state_s"] / report["empty"]["state_s"], 3)
    # the drainer's own SQL per run, all statements: what history could make slower
    for which in ("empty", "full"):
        report[which]["sql_s_per_run"] = round(sum(sql_s[which].values()) / args.runs, 4)
        report[which]["sql_s_median"] = round(statistics.median(sql_runs[which]), 4)
    report["sql_ratio"] = round(
        report["full"]["sql_s_per_run"] / report["empty"]["sql_s_per_run"], 3
    )
    report["slowest_sql_full_ms_per_run"] = {
        stmt: round(1000 * total / args.runs, 2) for stmt, total in sql_s["full"].most_common(5)
    }
    grown = Counter({k: sql_s["full"][k] - sql_s["empty"][k] for k in sql_s["full"]})
    report["sql_grown_ms_per_run"] = {  # full minus empty: what history made slower
        stmt: round(1000 * d / args.runs, 2) for stmt, d in grown.most_common(5)
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "history_scale.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
