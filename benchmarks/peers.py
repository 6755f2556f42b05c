"""drainer next to its peers on the same records and the same output table (issues 10 and 51).

  .venv/bin/python benchmarks/peers.py          # --records 1000000 --small 1000 --repeat 5

Peers, each a whole process timed from launch to exit, each reading the same Kafka records
(3 levels x 4 partitions, 100-byte values over 1,000 keys) and writing the same table shape
(level, minute, key, records: the `time_buckets` use case) into Postgres:
- `drainer`: `drainer run <drain>` from the CLI, on the default Spark (the local Connect server);
- `pyspark_warm_tuned`: the hand-written PySpark job on the same warm Connect server, with
  drainer's read options;
- `pyspark_tuned` / `pyspark`: the hand-written job, cold (its own `local[*]` JVM), reading the
  topics from earliest to latest with drainer's read options / with Spark's defaults;
- `poll_loop_tuned` / `poll_loop`: a confluent-kafka consumer polling the same partitions to
  their end, aggregating in a dict, with drainer's fetch wait / librdkafka's defaults.
Every peer writes its buckets with COPY (psycopg), as drainer's Postgres sink does.
Then the per-run cost of a small run (`--small` records): `drainer run` vs the cold and warm
PySpark jobs. Each is timed `--repeat` times, alternating in rotating order, after one untimed
`drainer run` (the Connect session's warm-up); medians. Every `drainer run` is a new drain over
the same topics (its own group, offsets and table), so each drains the whole backlog.

Read back: every path's table is read with psycopg; its buckets must sum to the records of each
level and equal drainer's buckets exactly (the aggregate carries no source coordinates, so the
tables are compared with each other and with the source's counts); a disagreement exits 1.
Results: `benchmarks/results/peers-<label>.json`. A UI-launched run is `dagster_launch.py`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime

import fair
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


def read_options(tuned: bool) -> dict[str, str]:
    """drainer's read options for 12 ranges on this machine's cores (a cold job's `local[*]`
    has as many as the Connect server's), or none."""
    if not tuned:
        return {}
    return fair.drainer_read_options(LEVELS * PARTITIONS, os.cpu_count())


def pyspark_job(topics: list[str], table: str, tuned: bool, warm: bool) -> int:
    """The hand-written job: what a data engineer writes without drainer. Cold: its own
    `local[*]` JVM; warm: a session on the running Connect server."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from drainer.services import spark_kafka_jars
    from drainer.settings import load_settings

    settings = load_settings()
    if warm:
        from spark_jobs.session import get_spark

        spark = get_spark(load_settings())
    else:
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
        .options(**read_options(tuned))
        .load()
    )
    buckets = df.groupBy(
        F.element_at(F.split("topic", "-"), -1).cast("int").alias("level"),
        F.date_trunc("minute", "timestamp").alias("minute"),
        F.col("key").cast("string").alias("key"),
    ).agg(F.count(F.lit(1)).alias("records"))
    rows = [tuple(r) for r in buckets.collect()]
    _write_buckets(table, rows)
    if not warm:
        spark.stop()
    return sum(r[3] for r in rows)


def poll_loop(topics: list[str], table: str, tuned: bool) -> int:
    """A confluent-kafka consumer: poll every partition to its end, count, insert."""
    from confluent_kafka import Consumer, TopicPartition

    from drainer.settings import load_settings

    consumer = Consumer(
        {
            "bootstrap.servers": load_settings().bootstrap_servers,
            "group.id": f"peers-{os.getpid()}",
            "enable.auto.commit": False,
            **(fair.drainer_consumer_settings() if tuned else {}),
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
    cmd = [sys.executable, __file__, "--peer", kind, "--topics", ",".join(_topics(drain))]
    seconds, output = _timed([*cmd, "--table", table])
    counts = [line for line in output.splitlines() if line.strip().isdigit()]
    assert counts and int(counts[-1]) == sum_planned(drain), output[-2000:]
    return seconds


def run_peer(kind: str, topics: list[str], table: str) -> int:
    tuned = kind.endswith("_tuned")
    if kind.startswith("poll_loop"):
        return poll_loop(topics, table, tuned)
    return pyspark_job(topics, table, tuned, warm="_warm" in kind)


def _reader(drain, records: int) -> tuple[object, str]:
    """Another drain over `drain`'s topics: its own group, offsets and table, so each timed
    `drainer run` drains the same backlog from the start."""
    from tests.support.drains import create_drain

    reader, config = create_drain(
        OUT,
        prefix="peer",
        levels=drain.levels,
        partitions=PARTITIONS,
        budget=max(records, 8),
        topic=drain.topic,
    )
    return reader, str(config)


def sum_planned(drain) -> int:
    from drainer.kafka.session import KafkaSession

    with KafkaSession(drain, load_settings()) as kafka:
        marks = kafka.watermarks(kafka.partitions(range(drain.levels)))
    return sum(wm.high - wm.low for wm in marks.values())


def buckets_of(table: str) -> set[tuple]:
    """A path's buckets as psycopg reads them: (level, minute, key, records)."""
    import psycopg

    from drainer.settings import load_settings, psycopg_url

    with psycopg.connect(psycopg_url(load_settings().database_url)) as conn:
        rows = conn.execute(f'SELECT level, minute, key, records FROM "{table}"').fetchall()
    found = set(rows)
    if len(found) != len(rows):
        sys.exit(f"{table}: a bucket is written twice")
    return found


def check_buckets(path: str, table: str, drain, reference: set[tuple] | None) -> set[tuple]:
    """Exit 1 unless `table`'s buckets add up to each level's records (and equal drainer's)."""
    from drainer.kafka.session import KafkaSession

    found = buckets_of(table)
    with KafkaSession(drain, load_settings()) as kafka:
        marks = kafka.watermarks(kafka.partitions(range(drain.levels)))
    per_level = Counter()
    for (level, _), wm in marks.items():
        per_level[level] += wm.high - wm.low
    summed = Counter()
    for level, _, _, n in found:
        summed[level] += n
    if summed != per_level:
        sys.exit(f"{path}: its buckets sum to {dict(summed)} per level, not {dict(per_level)}")
    if reference is not None and found != reference:
        sys.exit(f"{path}: {len(found ^ reference)} buckets differ from drainer's")
    return found


def drop(table: str) -> None:
    import psycopg

    from drainer.settings import load_settings, psycopg_url

    with psycopg.connect(psycopg_url(load_settings().database_url)) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


LEVELS, PARTITIONS = 3, 4
PEERS = ["pyspark_warm_tuned", "pyspark_tuned", "pyspark", "poll_loop_tuned", "poll_loop"]
SMALL_PEERS = ["pyspark_warm_tuned", "pyspark_tuned", "pyspark"]


def contenders() -> dict[str, fair.Contender]:
    reads, polls = read_options(tuned=True), fair.drainer_consumer_settings()
    C = fair.Contender
    return {
        "drainer": C("drainer", fair.DRAINER, "drainer run (CLI), time_buckets", reads),
        "pyspark_warm_tuned": C(
            "pyspark_warm_tuned", fair.TUNED, "hand-written job, warm Connect server", reads
        ),
        "pyspark_tuned": C("pyspark_tuned", fair.TUNED, "hand-written job, cold JVM", reads),
        "pyspark": C("pyspark", fair.DEFAULT, "hand-written job, cold JVM"),
        "poll_loop_tuned": C("poll_loop_tuned", fair.TUNED, "confluent-kafka poll loop", polls),
        "poll_loop": C("poll_loop", fair.DEFAULT, "confluent-kafka poll loop"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds, medians")
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    parser.add_argument("--topics", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        print(run_peer(args.peer, args.topics.split(","), args.table))
        return 0

    paths = contenders()
    for label, records in (("large", args.records), ("small", args.small)):
        drain = fresh_drain(records, levels=LEVELS, partitions=PARTITIONS)
        produce(drain, records)
        assert sum_planned(drain) == records
        readers = [_reader(drain, records) for _ in range(args.repeat)]
        warm, warm_config = _reader(drain, records)  # the Connect session, its Python workers
        _drainer_run(warm, warm_config)
        drop(warm.sink.table)
        kinds = ["drainer", *(PEERS if label == "large" else SMALL_PEERS)]
        walls: dict[str, list[float]] = {kind: [] for kind in kinds}
        phases: list[dict] = []
        reference: set[tuple] | None = None
        for round_, (reader, config) in enumerate(readers):
            order = kinds[round_ % len(kinds) :] + kinds[: round_ % len(kinds)]
            # drainer's buckets first, the reference every peer's must equal
            for kind in ["drainer", *(k for k in order if k != "drainer")]:
                if kind == "drainer":
                    seconds, result = _drainer_run(reader, config)
                    assert result["drained"] == records, result
                    phases.append(result["phases"])
                    table = reader.sink.table
                else:
                    table = f"{drain.name}_{kind}"
                    seconds = _peer(kind, drain, table)
                reference = check_buckets(kind, table, drain, reference)
                drop(table)
                walls[kind].append(seconds)
            print(f"{label} round {round_}: read back", flush=True)
            reference = None  # the next round's drainer run gives it again
        rows = fair.report(f"peers, {label}", records, [paths[k] for k in kinds], walls)
        for row in rows:
            if row["kind"] == fair.DRAINER:
                row["phases"] = {k: fair.median([p.get(k, 0.0) for p in phases]) for k in phases[0]}
            row["sink"] = "postgres_buckets"
        fair.write_results(
            "peers",
            {"label": label, "records": records, "repeat": args.repeat, "rows": rows},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
