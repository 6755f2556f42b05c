"""How the driver hands a small read of many partitions to Spark (spark_jobs.driver_read).

  .venv/bin/python benchmarks/driver_read_handover.py     # --records 192000 --partitions 64 --repeat 3

The records of 3 x P partitions, read once per round by the driver's consumer
(`driver_read.read_records`, timed), then handed over three ways, each timed to its DataFrame,
its schema (one plan analysis) and two counts: as a Spark Connect local relation
(`createDataFrame` of the Arrow table), the same made eager with `localCheckpoint`, and as
Parquet files Spark reads (what drainer does, where Spark shares this machine's files).
Medians over the rounds. Every count must be the records produced.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
import uuid
from collections import defaultdict
from typing import Any

from common import fresh_drain, produce

from drainer.settings import load_settings

WAYS = ("local_relation", "local_checkpoint", "parquet_files")


def hand_over(spark: Any, table: Any, way: str, stage: Any) -> tuple[Any, float]:
    from spark_jobs import driver_read

    started = time.perf_counter()
    if way == "parquet_files":
        import pyarrow.parquet as pq

        stage.mkdir(parents=True)
        half = -(-table.num_rows // 2)
        for i in range(2):
            pq.write_table(table.slice(i * half, half), stage / f"{i}.parquet", compression="none")
        df = spark.read.schema(driver_read.KAFKA_COLUMNS).parquet(str(stage))
    else:
        df = spark.createDataFrame(table, driver_read.KAFKA_COLUMNS)
        if way == "local_checkpoint":
            df = df.localCheckpoint(eager=True)
    return df, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=192_000)
    parser.add_argument("--partitions", type=int, default=64, help="per level (3 levels)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from drainer.kafka.session import KafkaSession
    from spark_jobs import driver_read
    from spark_jobs.session import get_spark

    settings = load_settings()
    drain = fresh_drain(args.records, levels=3, partitions=args.partitions)
    produce(drain, args.records)
    with KafkaSession(drain, settings) as kafka:
        marks = kafka.watermarks({lvl: list(range(args.partitions)) for lvl in range(3)})
    bounds = {(drain.level_topic(lvl), p): (0, w.high) for (lvl, p), w in marks.items()}
    spark = get_spark(settings)
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.repeat):
        started = time.perf_counter()
        table = driver_read.read_records(drain, settings.bootstrap_servers, bounds)
        times["driver's read"].append(time.perf_counter() - started)
        assert table.num_rows == args.records, table.num_rows
        for way in WAYS:
            stage = settings.home / driver_read.DRIVER_READS / f"bench-{uuid.uuid4().hex}"
            df, made = hand_over(spark, table, way, stage)
            t0 = time.perf_counter()
            df.schema  # noqa: B018 (an analysis of the plan)
            t1 = time.perf_counter()
            assert df.count() == args.records
            t2 = time.perf_counter()
            assert df.where("length(value) > 0").count() == args.records
            t3 = time.perf_counter()
            times[f"{way}: DataFrame"].append(made)
            times[f"{way}: schema"].append(t1 - t0)
            times[f"{way}: count"].append(t2 - t1)
            times[f"{way}: second count"].append(t3 - t2)
            shutil.rmtree(stage, ignore_errors=True)
    print(f"{args.records:,} records on 3 x {args.partitions} partitions, medians of {args.repeat}")
    print("| step | seconds |\n|---|---:|")
    for step, found in times.items():
        print(f"| {step} | {statistics.median(found):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
