"""Throughput and driver memory of one large drain run (issue 2: 1,000,000 records).

Each size runs in a fresh process (fresh JVM), so peak memory figures belong to that size only:
  .venv/bin/python benchmarks/drain_throughput.py --records 100000 1000000

Per size it produces the backlog across 3 levels, warms the Spark session, then times one
`spark_jobs.drain_job.run` (plan, Spark read + time buckets + staging, commit, mirror) with a
budget covering the whole backlog. Reported: wall time, records/s, the Python driver's peak
RSS, the JVM's peak RSS (local mode: driver and executors share it) and its heap after a GC.
The Python driver never receives records (tasks write to Postgres; only counts come back), so
its memory should be flat across sizes.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from common import created_drain, vm_hwm_kb

from drainer.settings import load_settings

OUT = Path(__file__).resolve().parent / "out"


def one_size(records: int) -> dict:
    # this benchmark reads the JVM's memory, so it needs the JVM in this process
    os.environ["SPARK_MASTER"] = os.environ.get("SPARK_MASTER", "local[*]")
    os.environ.pop("SPARK_REMOTE", None)
    from drainer import services
    from drainer.settings import set_config_path

    services.up(load_settings(), echo=lambda *_: None)
    drain, config = created_drain(OUT, prefix="bench", partitions=4, budget=records)
    set_config_path(config)  # current for the rest of this benchmark process
    name = drain.name
    started = time.monotonic()
    per_level = [records // 3 + (1 if i < records % 3 else 0) for i in range(3)]
    for level, count in enumerate(per_level):  # a child process, so its buffers are not ours
        subprocess.run(
            [
                sys.executable,
                "-m",
                "spark_jobs.cli",
                "produce",
                name,
                "--level",
                str(level),
                "--count",
                str(count),
                "--keys",
                "1000",
                "--value-size",
                "100",
                "--seed",
                str(level),
            ],
            check=True,
            capture_output=True,
        )
    produce_s = time.monotonic() - started

    from spark_jobs import drain_job
    from spark_jobs.session import get_spark

    spark = get_spark(load_settings())
    spark.range(1000).count()  # start the JVM and workers before timing
    started = time.monotonic()
    result = drain_job.run(drain, trigger="benchmark", settings=load_settings())
    run_s = time.monotonic() - started
    assert result.drained == records, f"drained {result.drained} of {records}"

    jvm = spark._jvm
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    heap_after_gc = runtime.totalMemory() - runtime.freeMemory()
    jvm_pid = jvm.java.lang.ProcessHandle.current().pid()
    jvm_peak_kb = vm_hwm_kb(jvm_pid)
    config.unlink()
    return {
        "records": records,
        "produce_s": round(produce_s, 2),
        "run_s": round(run_s, 2),
        "records_per_s": round(records / run_s),
        "python_driver_peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ),
        "jvm_peak_rss_mb": round(jvm_peak_kb / 1024),
        "jvm_heap_after_gc_mb": round(heap_after_gc / 2**20),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    if args.one:
        print(json.dumps(one_size(args.one)))
        return 0
    rows = []
    for records in args.records:
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(records)], capture_output=True, text=True
        )
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1])
    with open(OUT / "drain_throughput.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(
        "\n| records | run (s) | records/s | Python driver peak RSS (MB) | JVM peak RSS (MB) | JVM heap after GC (MB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['records']:,} | {r['run_s']} | {r['records_per_s']:,} | {r['python_driver_peak_rss_mb']} "
            f"| {r['jvm_peak_rss_mb']} | {r['jvm_heap_after_gc_mb']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
