"""drainer next to its peers on the same records and the same output table (issue 10).

  .venv/bin/python benchmarks/peers.py          # --records 1000000 --small 1000 --repeat 3

Peers, each a whole process timed from launch to exit, each reading the same Kafka records
(3 levels × 4 partitions, 100-byte values over 1,000 keys) and writing the same table shape
(level, minute, key, records: the `time_buckets` use case) into Postgres:
- drainer: `drainer run <drain>` from the CLI, on the default Spark (the local Connect server);
- pyspark: a hand-written PySpark job, cold (its own `local[*]` JVM), reading the topics from
  earliest to latest, aggregating, and inserting the buckets with psycopg;
- poll loop: a confluent-kafka consumer polling the same partitions to their end, aggregating
  in a dict, and inserting the buckets with psycopg.
Then the per-run cost of a small run (`--small` records): `drainer run` vs the cold PySpark job.
Each is timed `--repeat` times, alternating in rotating order so that load weighs on all alike,
after one untimed `drainer run` (the Connect session's warm-up); medians. Every `drainer run` is
a new drain over the same topics (its own group, offsets and table), so each drains the whole
backlog.

A UI-launched run is `dagster_launch.py`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime

from common import OUT, fresh_drain, produce

from drainer.settings import load_settings

BUCKETS_DDL = "level int, minute timestamptz, key text, records bigint"


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout + done.stderr


def _topics(drain) -> list[str]:
    return [drain.level_topic(level) for level in range(drain.levels)]


def _write_buckets(table: str, buckets: list[tuple]) -> None:
    import psycopg

    from drainer.settings import load_settings, psycopg_url

    with psycopg.connect(psycopg_url(load_settings().database_url)) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        conn.execute(f'CREATE TABLE "{table}" ({BUCKETS_DDL})')
        with conn.cursor().copy(f'COPY "{table}" FROM STDIN') as copy:
            for row in buckets:
                copy.write_row(row)


def pyspark_job(topics: list[str], table: str) -> int:
    """The hand-written job: what a data engineer writes without drainer."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from drainer.services import spark_kafka_jars
    from drainer.settings import load_settings

    settings = load_settings()
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    spark = (
        SparkSession.builder.master("local[*]")
        .config("spark.jars", ",".join(str(j) for j in spark_kafka_jars(settings.home)))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    buckets = df.groupBy(
        F.element_at(F.split("topic", "-"), -1).cast("int").alias("level"),
        F.date_trunc("minute", "timestamp").alias("minute"),
        F.col("key").cast("string").alias("key"),
    ).agg(F.count(F.lit(1)).alias("records"))
    rows = [tuple(r) for r in buckets.collect()]
    _write_buckets(table, rows)
    spark.stop()
    return sum(r[3] for r in rows)


def poll_loop(topics: list[str], table: str) -> int:
    """A confluent-kafka consumer: poll every partition to its end, count, insert."""
    from confluent_kafka import Consumer, TopicPartition

    from drainer.settings import load_settings

    consumer = Consumer(
        {
            "bootstrap.servers": load_settings().bootstrap_servers,
            "group.id": f"peers-{os.getpid()}",
            "enable.auto.commit": False,
        }
    )
    ends: dict[tuple[str, int], int] = {}
    assignment = []
    for topic in topics:
        for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
            if high > low:
                ends[(topic, partition)] = high
                assignment.append(TopicPartition(topic, partition, low))
    consumer.assign(assignment)
    counts: Counter = Counter()
    while ends:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error():
                continue
            topic, partition = msg.topic(), msg.partition()
            minute = datetime.fromtimestamp(msg.timestamp()[1] // 60_000 * 60, UTC)
            key = None if msg.key() is None else msg.key().decode("utf-8", "replace")
            counts[(int(topic.rsplit("-", 1)[1]), minute, key)] += 1
            if msg.offset() + 1 >= ends.get((topic, partition), 0):
                ends.pop((topic, partition), None)
    consumer.close()
    _write_buckets(table, [(*k, n) for k, n in counts.items()])
    return sum(counts.values())


def _drainer_run(drain, config: str) -> tuple[float, dict]:
    env = {**os.environ, "DRAINER_CONFIG": config}
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", drain.name, "--json"]
    seconds, output = _timed(cmd, env)
    return seconds, json.loads(output[output.index("{") : output.rindex("}") + 1])


def _peer(kind: str, drain, table: str) -> float:
    cmd = [sys.executable, __file__, f"--{kind}", ",".join(_topics(drain)), "--table", table]
    seconds, output = _timed(cmd)
    counts = [line for line in output.splitlines() if line.strip().isdigit()]
    assert counts and int(counts[-1]) == sum_planned(drain), output[-2000:]
    return seconds


def _reader(drain, records: int) -> tuple[object, str]:
    """Another drain over `drain`'s topics: its own group, offsets and table, so each timed
    `drainer run` drains the same backlog from the start."""
    from tests.support.drains import create_drain

    reader, config = create_drain(
        OUT,
        prefix="peer",
        levels=drain.levels,
        partitions=4,
        budget=max(records, 8),
        topic=drain.topic,
    )
    return reader, str(config)


def sum_planned(drain) -> int:
    from drainer.kafka.session import KafkaSession

    with KafkaSession(drain, load_settings()) as kafka:
        marks = kafka.watermarks(kafka.partitions(range(drain.levels)))
    return sum(wm.high - wm.low for wm in marks.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds, medians")
    parser.add_argument("--pyspark", help=argparse.SUPPRESS)
    parser.add_argument("--poll", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pyspark:
        print(pyspark_job(args.pyspark.split(","), args.table))
        return 0
    if args.poll:
        print(poll_loop(args.poll.split(","), args.table))
        return 0

    report: dict = {}
    for label, records in (("large", args.records), ("small", args.small)):
        drain = fresh_drain(records)
        produce(drain, records)
        assert sum_planned(drain) == records
        readers = [_reader(drain, records) for _ in range(args.repeat)]
        warm, warm_config = _reader(drain, records)  # the Connect session, its Python workers
        _drainer_run(warm, warm_config)
        times: dict[str, list[float]] = {"drainer": [], "pyspark": [], "poll_loop": []}
        phases: list[dict] = []
        kinds = list(times) if label == "large" else ["drainer", "pyspark"]
        for round_, (reader, config) in enumerate(readers):
            for kind in kinds[round_ % len(kinds) :] + kinds[: round_ % len(kinds)]:
                if kind == "drainer":
                    seconds, result = _drainer_run(reader, config)
                    assert result["drained"] == records, result
                    phases.append(result["phases"])
                else:
                    seconds = _peer(kind.split("_")[0], drain, f"{drain.name}_{kind}")
                times[kind].append(seconds)
        row: dict = {"records": records, "load": os.getloadavg()[0]}
        for kind in kinds:
            row[f"{kind}_s"] = round(statistics.median(times[kind]), 2)
            row[f"{kind}_all"] = [round(t, 2) for t in times[kind]]
        row["drainer_phases"] = {
            k: round(statistics.median(p.get(k, 0.0) for p in phases), 3) for k in phases[0]
        }
        row["drainer_over_pyspark"] = round(row["drainer_s"] / row["pyspark_s"], 2)
        if "poll_loop_s" in row:
            row["drainer_over_poll_loop"] = round(row["drainer_s"] / row["poll_loop_s"], 2)
        report[label] = row
        print(json.dumps(row), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "peers.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
