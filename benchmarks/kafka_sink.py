"""drainer's Kafka sink against Spark's own Kafka sink and a confluent-kafka transactional loop
(issue 27).

  .venv/bin/python benchmarks/kafka_sink.py      # --records 1000000 --repeat 1

N records (100-byte values over 1,000 keys, 3 levels x 4 partitions) are produced once; each path
copies them into an output topic of its own (4 partitions):

- `drainer`: a drain with `sink: {type: kafka}`, dataframe mode, `kafka_passthrough` (every
  record as it is, with drainer's run and source headers), budget = N so one run drains it all;
  timed: `spark_jobs.drain_job.run` whole (plan, Spark, the run's one transaction, Postgres
  commit, Kafka mirror). Exactly once for `read_committed` consumers.
- `spark_kafka_sink`: the same read (`assign` + numeric offsets, as drainer reads) and
  `df.write.format("kafka")` on the same warm Connect session: at-least-once (a retried task
  produces again), no transaction, no offsets kept anywhere.
- `txn_loop`: the consume-process-produce loop Kafka's own exactly-once tutorials show, in one
  Python process with confluent-kafka: a consumer group reading `read_committed`, a
  transactional producer, `send_offsets_to_transaction` and a commit every 100,000 records.
- `server_task` (a prototype, opt in with `--paths`): the one transactional producer in one
  Python task on the Spark server, so no row crosses to the driver (see `run_server_task`).
- `drainer_driver` (opt in with `--paths`): `drainer` with the sink's `producer: driver`, its
  one transactional producer in the drainer process (confluent-kafka), every output row
  streamed to it; `drainer` itself produces on the Spark server where the server has drainer's
  producer jar (`producer: auto`; the table shows which producer ran).

Each path is warmed by a small run first (`--warmup` records, its own topics). Output record
counts are checked against N (end offsets of the output topics minus the commit markers a
transactional path writes: read back `read_committed`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from common import OUT, delete_at_exit, fresh_drain, produce

from drainer.settings import load_settings

PROCESSOR = "spark_jobs.examples:kafka_passthrough"
COMMIT_EVERY = 100_000
PRODUCER: dict[str, str] = {}  # the drain's `kafka_librdkafka:` (--producer key=value ...)


def _bootstrap() -> str:
    from drainer.settings import load_settings

    return load_settings().bootstrap_servers


def create_topic(partitions: int = 4) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"bench_out_{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": _bootstrap()})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[
        name
    ].result(30)
    delete_at_exit(topics=[name])
    return name


def committed_count(topic: str) -> int:
    """Records a `read_committed` consumer sees in `topic`."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": _bootstrap(),
            "group.id": f"count-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    open_parts, count = set(parts), 0
    while open_parts:
        for msg in consumer.consume(10_000, 10):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    open_parts.discard(msg.partition())
                continue
            count += 1
    consumer.close()
    return count


def source(records: int) -> Any:
    drain = fresh_drain(records, name=f"bench_kfk_{uuid.uuid4().hex[:8]}")
    produce(drain, records)
    return drain


def run_drainer(src: Any, records: int, producer: str = "auto") -> dict[str, Any]:
    from spark_jobs import drain_job

    out = create_topic()
    drain = fresh_drain(
        records,
        name=f"bench_kfk_{uuid.uuid4().hex[:8]}",
        topic=src.topic,
        processor=PROCESSOR,
        sink={"type": "kafka", "topic": out, "producer": producer},
        **({"kafka_librdkafka": PRODUCER} if PRODUCER else {}),
    )
    started = time.perf_counter()
    result = drain_job.run(drain, trigger="bench", settings=load_settings())
    wall = time.perf_counter() - started
    assert result.drained == records, f"drained {result.drained} of {records}"
    producer_ran = (result.table_commit or {}).get("details", {}).get("producer")
    return {"wall_s": round(wall, 2), "phases": result.phases, "out": out, "producer": producer_ran}


def run_drainer_driver(src: Any, records: int) -> dict[str, Any]:
    return run_drainer(src, records, producer="driver")


def bounded_read(spark: Any, src: Any) -> Any:
    """The source's whole backlog as Spark reads it (`assign` + numeric offsets, as drainer
    reads)."""
    from drainer.kafka.session import KafkaSession
    from spark_jobs.kafka_source import BOUNDED_FETCH_MAX_WAIT_MS, BOUNDED_MAX_POLL_RECORDS

    with KafkaSession(src, load_settings()) as kafka:
        marks = kafka.watermarks(kafka.partitions(range(src.levels)))
    assign: dict[str, list[int]] = {}
    start: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    for (level, partition), w in marks.items():
        topic = src.level_topic(level)
        assign.setdefault(topic, []).append(partition)
        start.setdefault(topic, {})[str(partition)] = w.low
        end.setdefault(topic, {})[str(partition)] = w.high
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", _bootstrap())
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(start))
        .option("endingOffsets", json.dumps(end))
        .option("includeHeaders", "true")
        # drainer's read settings, so that the paths differ in their sinks only
        .option("kafka.fetch.max.wait.ms", str(BOUNDED_FETCH_MAX_WAIT_MS))
        .option("kafka.max.poll.records", str(BOUNDED_MAX_POLL_RECORDS))
        .load()
    )


def run_spark_sink(src: Any, records: int) -> dict[str, Any]:
    from spark_jobs.session import get_spark

    spark = get_spark(load_settings())
    out = create_topic()
    read = bounded_read(spark, src)  # planned before the clock starts, as for server_task
    started = time.perf_counter()
    (
        read.select("key", "value", "headers")
        .write.format("kafka")
        .mode("append")  # Kafka's V2 writer, which drainer's session uses, takes only append
        .option("kafka.bootstrap.servers", _bootstrap())
        .option("topic", out)
        .save()
    )
    wall = time.perf_counter() - started
    return {"wall_s": round(wall, 2), "out": out}


def run_txn_loop(src: Any, records: int) -> dict[str, Any]:
    """Kafka's transactional consume-process-produce loop, in one Python process."""
    from confluent_kafka import Consumer, Producer

    out = create_topic()
    group = f"bench-loop-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            "bootstrap.servers": _bootstrap(),
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": _bootstrap(),
            "transactional.id": group,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
        }
    )
    started = time.perf_counter()
    producer.init_transactions(30)
    consumer.subscribe([src.level_topic(level) for level in range(src.levels)])
    producer.begin_transaction()
    done = since_commit = 0
    while done < records:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                continue
            while True:
                try:
                    producer.produce(out, msg.value(), msg.key(), headers=msg.headers())
                    break
                except BufferError:
                    producer.poll(0.1)
            done += 1
            since_commit += 1
        if since_commit >= COMMIT_EVERY or done >= records:
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
            )
            producer.commit_transaction()
            since_commit = 0
            if done < records:
                producer.begin_transaction()
    wall = time.perf_counter() - started
    consumer.close()
    return {"wall_s": round(wall, 2), "out": out}


def run_server_task(src: Any, records: int) -> dict[str, Any]:
    """A prototype, not drainer: the one transactional producer in one Python task on the
    Spark server (`coalesce(1)` + `mapInArrow`), so no row crosses to the driver. Same producer
    settings and the same two headers per record as drainer's sink; no marker, lease or
    Postgres (it measures the data path only). Opt in with `--paths ...,server_task`."""
    from pyspark.sql import functions as F

    from drainer.kafka.transactions import OUTPUT_PRODUCER_DEFAULTS
    from spark_jobs.session import get_spark

    spark = get_spark(load_settings())
    out = create_topic()
    bootstrap, tid = _bootstrap(), f"bench-task-{uuid.uuid4().hex[:8]}"
    defaults = dict(OUTPUT_PRODUCER_DEFAULTS)  # the task gets a copy with its function

    def produce_all(batches: Any) -> Any:
        import pyarrow as pa
        from confluent_kafka import Producer

        producer = Producer(
            {
                **defaults,
                "bootstrap.servers": bootstrap,
                "transactional.id": tid,
                "delivery.report.only.error": True,
            }
        )
        producer.init_transactions(60)
        producer.begin_transaction()
        produce, run, n = producer.produce, b"1:bench:1", 0
        for batch in batches:
            values, keys, sources = (batch.column(i).to_pylist() for i in range(3))
            for value, key, source in zip(values, keys, sources, strict=True):
                headers = [("drainer.run", run), ("drainer.source", source)]
                while True:
                    try:
                        produce(out, value, key, headers=headers)
                        break
                    except BufferError:
                        producer.poll(0.1)
            n += len(values)
        producer.flush(120)
        producer.commit_transaction(120)
        yield pa.RecordBatch.from_pydict({"n": [n]})

    read = bounded_read(spark, src)
    started = time.perf_counter()
    rows = read.select(
        "value",
        "key",
        F.concat_ws("/", "topic", "partition", "offset").cast("binary").alias("source"),
    )
    produced = rows.coalesce(1).mapInArrow(produce_all, "n long").collect()
    wall = time.perf_counter() - started
    assert sum(r.n for r in produced) == records, produced
    return {"wall_s": round(wall, 2), "out": out}


PATHS = {"drainer": run_drainer, "spark_kafka_sink": run_spark_sink, "txn_loop": run_txn_loop}
PROTOTYPES = {"server_task": run_server_task, "drainer_driver": run_drainer_driver}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--paths",
        default=",".join(PATHS),
        help="comma-separated, of: " + ", ".join([*PATHS, *PROTOTYPES]),
    )
    parser.add_argument(
        "--producer",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="librdkafka settings of the drainer path's drain, e.g. compression.type=none",
    )
    args = parser.parse_args()
    PRODUCER.update(item.split("=", 1) for item in args.producer)
    paths = {name: {**PATHS, **PROTOTYPES}[name] for name in args.paths.split(",")}
    warm = source(args.warmup)
    for path in paths.values():
        path(warm, args.warmup)
    src = source(args.records)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in paths}
    for round_ in range(args.repeat):
        names = list(paths)
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            got = paths[name](src, args.records)
            count = committed_count(got["out"])
            assert count >= args.records, f"{name}: {count} of {args.records} records"
            got["records_out"] = count
            results[name].append(got)
            ran = f" (producer: {got['producer']})" if got.get("producer") else ""
            print(name, got["wall_s"], "s" + ran, flush=True)
    summary = {
        name: {
            "median_s": statistics.median(r["wall_s"] for r in rs),
            "records_per_s": round(args.records / statistics.median(r["wall_s"] for r in rs)),
            "runs": rs,
        }
        for name, rs in results.items()
    }
    base = summary["spark_kafka_sink"]["median_s"] if "spark_kafka_sink" in summary else None
    for s in summary.values():
        s["vs_spark_kafka_sink"] = round(s["median_s"] / base, 2) if base else None
    OUT.mkdir(exist_ok=True)
    report = {"at": datetime.now(UTC).isoformat(), "records": args.records, "paths": summary}
    (OUT / "kafka_sink.json").write_text(json.dumps(report, indent=2, default=str))
    print("| path | wall (s) | records/s | vs Spark's Kafka sink |")
    print("|---|---|---|---|")
    for name, s in summary.items():
        print(
            f"| {name} | {s['median_s']} | {s['records_per_s']:,} | {s['vs_spark_kafka_sink']}x |"
        )


if __name__ == "__main__":
    main()
