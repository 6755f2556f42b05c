"""Sink cost when every record becomes a row: 1,000,000 records, one output row each.

  .venv/bin/python benchmarks/sink_one_row.py            # --records 1000000 --publish attach

Dataframe mode with `spark_jobs.examples:one_row_per_record`, on the session runs use by default
(the local Spark Connect server; `SPARK_MASTER=local[*]` for an in-process one). Reported: the
whole run, the execute step (Spark read, the processor and the tasks' COPY into the run's stage
table) as staging rows/s, and the commit's publish step (`drainer.store.sink_tables.publish_staged`,
inside the commit transaction) with the path it took: `attach` (the stage becomes the target's
partition) or `copy` (`INSERT … SELECT` into a plain target). `--publish` sets `sink.publish`
of the fresh drain; left out, the drain has the default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from common import fresh_drain, produce

from drainer.settings import load_settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--publish", choices=["attach", "copy"], default=None)
    args = parser.parse_args()

    from drainer.lifecycle import run
    from drainer.store import sink_tables
    from spark_jobs import drain_job

    overrides = {}
    if args.publish:
        overrides["sink"] = {"table": f"bench_out_{args.publish}_{os.getpid()}"}
        overrides["sink"]["publish"] = args.publish
    drain = fresh_drain(
        args.records, processor="spark_jobs.examples:one_row_per_record", **overrides
    )
    produce(drain, args.records)
    print(f"spark: {drain_job.which_spark(load_settings())}", file=sys.stderr)
    timings: dict[str, float] = {}

    def timed_execute(ctx):
        started = time.perf_counter()
        executed = drain_job.execute(ctx)
        timings["execute_s"] = time.perf_counter() - started
        return executed

    publish = sink_tables.publish_staged  # the commit calls it through the module: patch it there

    def timed_publish(conn, table, run_id):
        kind = sink_tables.relkind(conn, table)  # what the commit decides by, read before it acts
        timings["publish_path"] = {"p": "attach", "r": "copy"}.get(kind, f"relkind {kind}")
        started = time.perf_counter()
        moved = publish(conn, table, run_id)
        timings["publish_s"] = time.perf_counter() - started
        timings["published_rows"] = moved
        return moved

    sink_tables.publish_staged = timed_publish
    started = time.perf_counter()
    result = run.drain_once(drain, timed_execute, None, "benchmark", settings=load_settings())
    total = time.perf_counter() - started
    assert result.drained == args.records, result.drained
    assert timings["published_rows"] == args.records, timings
    report = {
        "records": args.records,
        "run_s": round(total, 2),
        "execute_s": round(timings["execute_s"], 2),
        "staging_rows_per_s": round(args.records / timings["execute_s"]),
        "publish_s": round(timings["publish_s"], 2),
        "publish_path": timings["publish_path"],
        "spark": drain_job.which_spark(load_settings()),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
