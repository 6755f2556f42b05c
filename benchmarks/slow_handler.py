"""Record mode with a slow handler: what each ordering costs (issue 4).

    .venv/bin/python benchmarks/slow_handler.py [--records 10000] [--keys 1000] [--repeat 5]

10,000 records in one partition over 1,000 distinct keys, handled by `slow_echo` (a uniform
0-5 ms sleep per record, like a call to a downstream service), in record mode with each
ordering at `max_concurrency: 100`, on the real stack (Kafka, Postgres, local Spark). Each
repetition is a fresh drain (its own topic and sink), so every run reads and handles all the
records; the session is warmed first by throw-away runs (JVM start, class loading, the Kafka
connector, Python workers), which are not measured.

Four wall times per run, from the narrowest to the widest:

  task      inside the Spark task: from asking for the partition's first record to its sink
            rows and failures staged in Postgres (what `run_record_mode` returns per partition);
  stage     the Spark stage as Spark reports it (REST API of the driver UI: submission to
            completion): adds the task's launch, the Kafka consumer and Python worker hand-off;
  execute   `spark_jobs.drain_job.execute`, timed by a wrapper executor passed to
            `drainer.lifecycle.run.drain_once`: adds the driver's side (the Kafka relation's planning,
            `df.rdd`, sink DDL, clearing the run's staging) and the job's scheduling;
  run       the whole `drain_once`: adds the lease, planning, the commit and the Kafka mirror.

Expected: serial handler time is 10,000 x 2.5 ms = 25 s on average. `partition` is serial by
definition; `key` runs 1,000 chains of 10 records on 100 workers (10 rounds of ~25 ms) and
`unordered` 10,000 records on 100 workers: both ~0.25 s of sleeping. Target: key and unordered
<= 0.5 s of processing on Spark, partition close to 25 s. The script exits 1 if a run does not
put every record in the sink exactly once, or if the median task time of key or unordered
misses the target (the other times are reported against it too).

Writes benchmarks/out/slow_handler.csv (one row per run) and prints the summary table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from drainer.settings import load_settings

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
ORDERINGS = ("unordered", "key", "partition")
TARGET_S = 0.5
FIELDS = [
    "ordering",
    "repeat",
    "run_id",
    "records",
    "keys",
    "task_s",
    "stage_s",
    "execute_s",
    "run_s",
    "sink_rows",
]


def make_drain(config_dir: Path, ordering: str, args: argparse.Namespace, handler: str):
    from common import created_drain

    from drainer.settings import set_config_path
    from spark_jobs.examples import RECORD_ECHO_SCHEMA

    drain, path = created_drain(
        config_dir,
        prefix=f"bench_slow_{ordering}",
        levels=1,
        partitions=1,
        budget=args.records,
        mode="record",
        handler=handler,
        output_schema=RECORD_ECHO_SCHEMA,
        ordering=ordering,
        max_concurrency=args.concurrency,
    )
    set_config_path(path)  # current for the rest of this benchmark process
    return drain


def produce(drain, args: argparse.Namespace) -> None:
    from drainer.kafka.producer import synthetic_records
    from tests.support.stack import produce_records

    records = synthetic_records(args.records, keys=args.keys, value_size=100, seed=1)
    sent = produce_records(drain, records, level=0, partition=0)
    assert sent == args.records


def timed_run(drain) -> tuple[object, float, float]:
    """One real run: its result, the seconds in the Spark executor, and the task's seconds.

    The task's seconds come from what the record-mode job itself returns per Kafka partition
    (from asking for the first record to the results staged); the wrapper only keeps them.
    """
    from drainer.lifecycle.run import drain_once
    from spark_jobs import drain_job, modes

    spent: list[float] = []
    tasks: list[tuple] = []
    record_mode = modes.run_record_mode

    def keep_task_times(*args, **kwargs):
        counts = record_mode(*args, **kwargs)
        tasks.extend(counts)
        return counts

    def timed_execute(ctx):
        started = time.perf_counter()
        executed = drain_job.execute(ctx)
        spent.append(time.perf_counter() - started)
        return executed

    modes.run_record_mode = keep_task_times
    try:
        result = drain_once(drain, timed_execute, trigger="benchmark", settings=load_settings())
    finally:
        modes.run_record_mode = record_mode
    return result, sum(spent), max((t[-1] for t in tasks), default=0.0)


def stage_seconds(drain, run_id: int) -> float | None:
    """The run's Spark stage duration as Spark reports it (REST API of the driver's UI):
    from the stage's submission to its completion, without the driver's planning."""
    from spark_jobs.session import get_spark

    sc = get_spark(load_settings()).sparkContext
    if not sc.uiWebUrl:
        return None
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/stages?status=complete"
    with urllib.request.urlopen(url, timeout=10) as response:
        stages = json.load(response)
    mine = [
        st
        for st in stages
        if (st.get("description") or "").startswith(f"drain {drain.name}: run {run_id},")
    ]
    if not mine:
        return None

    def ts(value: str) -> datetime:
        return datetime.strptime(value.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")

    start = min(ts(st["submissionTime"]) for st in mine)
    end = max(ts(st["completionTime"]) for st in mine)
    return (end - start).total_seconds()


def sink_rows(drain) -> tuple[int, int]:
    from sqlalchemy import text

    from tests.support.stack import get_engine

    with get_engine().connect() as conn:
        return conn.execute(
            text(f'SELECT count(*), count(DISTINCT "offset") FROM "{drain.sink.table}"')
        ).one()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument(
        "--repeat", type=int, default=5, help="runs per ordering (partition: 1, it takes ~25 s)"
    )
    parser.add_argument("--orderings", nargs="*", default=list(ORDERINGS), choices=ORDERINGS)
    args = parser.parse_args(argv)
    os.environ.setdefault("DRAINER_SPARK_LOG_LEVEL", "ERROR")
    os.environ.setdefault("DRAINER_SPARK_UI", "true")  # its REST API reports stage times
    # stage times come from the driver's UI, so the driver (an in-process session) is ours
    os.environ.setdefault("SPARK_MASTER", "local[*]")
    # no console progress bars between the result lines
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell"
    )

    from drainer import services
    from spark_jobs.session import get_spark

    services.up(load_settings(), echo=lambda *_: None)
    config_dir = Path(tempfile.mkdtemp(prefix="drainer-bench-"))
    get_spark(load_settings())
    # warm-up: the first run pays for JVM class loading, the Kafka connector and the Python
    # workers; it is not measured
    for ordering in ORDERINGS:
        warm = make_drain(config_dir, ordering, args, "spark_jobs.examples:record_echo")
        produce(warm, args)
        timed_run(warm)

    rows = []
    failures = []
    for ordering in args.orderings:
        repeats = 1 if ordering == "partition" else args.repeat
        for repeat in range(1, repeats + 1):
            drain = make_drain(config_dir, ordering, args, "spark_jobs.examples:slow_echo")
            produce(drain, args)
            started = time.perf_counter()
            result, execute_s, task_s = timed_run(drain)
            run_s = time.perf_counter() - started
            stage_s = stage_seconds(drain, result.run_id)
            total, distinct = sink_rows(drain)
            if result.drained != args.records or total != args.records or distinct != total:
                failures.append(f"{ordering}: drained {result.drained}, sink {total}/{distinct}")
            rows.append(
                {
                    "ordering": ordering,
                    "repeat": repeat,
                    "run_id": result.run_id,
                    "records": args.records,
                    "keys": args.keys,
                    "execute_s": round(execute_s, 3),
                    "task_s": round(task_s, 3),
                    "stage_s": None if stage_s is None else round(stage_s, 3),
                    "run_s": round(run_s, 3),
                    "sink_rows": total,
                }
            )
            print(
                f"{ordering:<10} #{repeat}: task {task_s:7.3f} s, stage {stage_s or 0:7.3f} s, "
                f"execute {execute_s:7.3f} s, "
                f"whole run {run_s:7.3f} s, "
                f"{total:,} sink rows",
                flush=True,
            )

    OUT.mkdir(exist_ok=True)
    with (OUT / "slow_handler.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)

    print()
    print(
        f"{datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} cores ({platform.machine()}, "
        f"{platform.system()} {platform.release()}), {args.records:,} records, {args.keys:,} keys, "
        f"max_concurrency {args.concurrency}; medians (min-max) in seconds"
    )
    print("| ordering | runs | task | stage | execute | run |")
    print("|---|---|---|---|---|---|")
    for ordering in args.orderings:
        mine = [r for r in rows if r["ordering"] == ordering]
        cells = []
        for column in ("task_s", "stage_s", "execute_s", "run_s"):
            values = [r[column] for r in mine if r[column] is not None]
            if not values:
                cells.append("n/a")
                continue
            median = statistics.median(values)
            spread = f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""
            cells.append(f"{median:.3f}{spread}")
        print(f"| {ordering} | {len(mine)} | " + " | ".join(cells) + " |")
        task = statistics.median(r["task_s"] for r in mine)
        if ordering != "partition" and task > TARGET_S:
            failures.append(f"{ordering}: median task time {task:.3f} s > {TARGET_S} s")
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
