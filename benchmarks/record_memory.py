"""Record mode's Python worker memory against the size of a partition range (issue 10).

  .venv/bin/python benchmarks/record_memory.py           # --records 100000 1000000

One level, one partition, so the whole backlog is one Kafka partition range handled by one
Spark task; handler `spark_jobs.examples:record_echo` (one output row per record), partition ordering.
Each size runs in a fresh process with an in-process `local[*]` session, so its Python workers
are fresh and their peak resident memory (VmHWM, reported by the task itself) belongs to that
size only. Flat across sizes = bounded by a chunk, not by the range.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from common import fresh_drain, produce

from drainer.settings import load_settings


def one_size(records: int) -> dict:
    os.environ["SPARK_MASTER"] = "local[*]"  # fresh Python workers, this size's only
    os.environ.pop("SPARK_REMOTE", None)
    from spark_jobs import drain_job, modes
    from spark_jobs.examples import RECORD_ECHO_SCHEMA

    drain = fresh_drain(
        records,
        levels=1,
        partitions=1,
        mode="record",
        handler="spark_jobs.examples:record_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        ordering="partition",
    )
    produce(drain, records)
    tasks: list[tuple] = []
    record_mode = modes.run_record_mode

    def keep(ctx, df, schema, stage_table):
        tasks.extend(record_mode(ctx, df, schema, stage_table))
        return tasks

    modes.run_record_mode = keep
    started = time.perf_counter()
    result = drain_job.run(drain, trigger="benchmark", settings=load_settings())
    seconds = time.perf_counter() - started
    assert result.drained == records, result.drained
    (task,) = tasks
    return {
        "records": records,
        "run_s": round(seconds, 1),
        "records_per_s": round(records / seconds),
        "python_worker_peak_rss_mb": round(task[6] / 1024),
        "spark": drain_job.which_spark(load_settings()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_size(args.one)))
        return 0
    for records in args.records:
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(records)], capture_output=True, text=True
        )
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        print(done.stdout.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
