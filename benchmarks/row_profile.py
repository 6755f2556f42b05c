"""The Spark job's per-row cost, phase by phase, on one warm Spark session (issue 30).

    DRAINER_CONNECT_PORT=15030 .venv/bin/python benchmarks/row_profile.py --records 1000000

N records (3 levels x 4 partitions, 100-byte values over 1,000 keys) are produced into a fresh
drain, then read whole by each variant below, every one ending in Spark's `noop` sink (the rows
are produced and dropped: no table write), so that the differences are the phases themselves:

- `read`: drainer's bounded read (`spark_jobs.kafka_source.read_ranges`) alone;
- `read+count (strings)`: plus the per-(topic, partition) observation as it was before issue 30
  (two conditional sums per partition on the topic string, the record's size derived in each);
- `read+count`: plus the observation as it is now (`kafka_source.counted`: an integer key and
  the size computed once per row);
- `read+count+processor`: plus `spark_jobs.examples:one_row_per_record`;
- `streaming (AvailableNow)`: the hand-written job's read and the same projection,
  `readStream` of the level topics with `trigger(availableNow=True)`, into `noop` as well.

The writes (Postgres, Delta, Iceberg) and the commit are `benchmarks/lakehouse_sinks.py`'s.
Every variant runs once untimed (warm-up), then `--repeat` times in rotating order; medians.
Raw numbers go to `benchmarks/out/row_profile.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from drainer.settings import load_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import OUT, fresh_drain, produce  # noqa: E402


def stored_ranges(drain: Any) -> list[Any]:
    from confluent_kafka import Consumer, TopicPartition

    from drainer.settings import load_settings
    from drainer.store.runs import StoredRange

    consumer = Consumer({"bootstrap.servers": load_settings().bootstrap_servers, "group.id": "x"})
    ranges = []
    try:
        for level in range(drain.levels):
            topic = drain.level_topic(level)
            for partition in range(4):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition))
                if high > low:
                    ranges.append(StoredRange(topic, level, partition, low, high, "", high - low))
    finally:
        consumer.close()
    return ranges


def counted_strings(df: Any, ranges: list[Any]) -> tuple[Any, Any]:
    """`kafka_source.counted` before issue 30: string comparisons, the size in every sum."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from spark_jobs.kafka_source import record_bytes

    keys = sorted({(r.topic, r.partition) for r in ranges})
    observation = Observation(f"profile_{uuid.uuid4().hex}")
    size = record_bytes()
    metrics = []
    for i, (topic, part) in enumerate(keys):
        mine = (F.col("topic") == topic) & (F.col("partition") == part)
        metrics.append(F.sum(F.when(mine, 1).otherwise(0)).cast("long").alias(f"r{i}"))
        metrics.append(F.sum(F.when(mine, size).otherwise(0)).cast("long").alias(f"b{i}"))
    return df.observe(observation, *metrics), lambda: observation.get


def variants(spark: Any, drain: Any, ranges: list[Any], records: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from drainer.settings import load_settings
    from spark_jobs.examples import one_row_per_record
    from spark_jobs.kafka_source import counted, read_ranges
    from spark_jobs.session import cores

    settings = load_settings()
    split = cores(spark)

    def read() -> Any:
        return read_ranges(
            spark, drain, settings.bootstrap_servers, ranges, cores=split, home=settings.home
        )

    def noop(df: Any) -> None:
        df.write.format("noop").mode("overwrite").save()

    def v_read() -> None:
        noop(read())

    def v_strings() -> None:
        df, get = counted_strings(read(), ranges)
        noop(df)
        found = get()  # empty if Connect lost the observation (drainer then recounts)
        assert not found or sum(v for k, v in found.items() if k.startswith("r")) == records

    def v_count() -> None:
        df, measure = counted(read(), ranges)
        noop(df)
        assert sum(m.records for m in measure().values()) == records

    def v_processor() -> None:
        df, measure = counted(read(), ranges)
        noop(one_row_per_record(df))
        assert sum(m.records for m in measure().values()) == records

    def v_streaming() -> None:
        topics = ",".join(drain.level_topic(level) for level in range(drain.levels))
        rows = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", settings.bootstrap_servers)
            .option("subscribe", topics)
            .option("startingOffsets", "earliest")
            .option("kafka.fetch.max.wait.ms", "10")
            .load()
            .select(
                "topic",
                "partition",
                "offset",
                F.element_at(F.split("topic", "-"), -1).cast("int").alias("level"),
                F.col("key").cast("string").alias("key"),
                F.length("value").alias("value_size"),
            )
        )
        checkpoint = OUT / f"row_profile_ckpt_{uuid.uuid4().hex}"
        query = (
            rows.writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert sum(p.numInputRows for p in query.recentProgress) == records

    return {
        "read": v_read,
        "read+count (strings)": v_strings,
        "read+count": v_count,
        "read+count+processor": v_processor,
        "streaming (AvailableNow)": v_streaming,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from spark_jobs.session import get_spark

    drain = fresh_drain(args.records, levels=3, partitions=4)
    produce(drain, args.records)
    spark = get_spark(load_settings(), check=True)
    ranges = stored_ranges(drain)
    assert sum(r.records for r in ranges) == args.records
    runs = variants(spark, drain, ranges, args.records)
    for job in runs.values():  # warm-up: class loading, consumers, Python workers
        job()
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    loads = [os.getloadavg()[0]]
    for round_ in range(args.repeat):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            started = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - started)
        loads.append(os.getloadavg()[0])
    base = statistics.median(times["streaming (AvailableNow)"])
    print(f"{args.records:,} records, medians of {args.repeat}, load {loads}")
    print("| phase | wall (s) | ns/record | x streaming |\n|---|---:|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"| {name} | {median:.2f} ({min(values):.2f}-{max(values):.2f}) "
            f"| {median / args.records * 1e9:.0f} | {median / base:.2f} |"
        )
    OUT.mkdir(exist_ok=True)
    (OUT / "row_profile.json").write_text(
        json.dumps({"records": args.records, "times": times, "load": loads}, indent=2)
    )


if __name__ == "__main__":
    main()
