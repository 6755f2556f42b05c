"""drainer's Kafka sink against Spark's own Kafka sink, a confluent-kafka transactional loop,
and the limits of this machine (issues 27 and 51).

  .venv/bin/python benchmarks/kafka_sink.py      # --records 1000000 --repeat 5

N records (100-byte values over 1,000 keys, 3 levels x 4 partitions) are produced once; each path
copies them into an output topic of its own (4 partitions), every record with a
`drainer.source` header naming its source record (drainer's sink writes it; each peer is given
it), so that the output is read back by source coordinates (`readback.kafka`, a
`read_committed` consumer): a path whose output is not exactly the N records, each once, fails
the benchmark (exit 1).

- `drainer`: a drain with `sink: {type: kafka}`, dataframe mode, `kafka_passthrough`, budget =
  N so one run drains it all; timed: `spark_jobs.drain_job.run` whole (plan, Spark, the run's
  one transaction, Postgres commit, Kafka mirror). Exactly once for `read_committed` consumers.
- `spark_kafka_sink_tuned` / `spark_kafka_sink`: the same read (`assign` + numeric offsets, as
  drainer reads) and `df.write.format("kafka")` on the same warm Connect session, with
  drainer's read options and producer settings / with Spark's and Kafka's defaults.
  At-least-once: a retried task produces again; no transaction, no offsets kept.
- `txn_loop_tuned` / `txn_loop`: the consume-process-produce loop of Kafka's exactly-once
  tutorials, one Python process with confluent-kafka (a group reading `read_committed`, a
  transactional producer, `send_offsets_to_transaction`, a commit every 100,000 records), with
  drainer's fetch wait and producer settings / with librdkafka's defaults.
- limits, same sitting: `limit_spark_noop` (Spark reading the same ranges into `noop`, drainer's
  read options), `limit_consumer` (a bare confluent-kafka consumer taking the same records),
  `limit_spark_from_memory` (Spark writing the same rows, cached in memory first, into a topic
  with drainer's producer settings), `limit_producer` (one transaction of N records already in
  memory: the JVM producer where a JDK is, else drainer's Python loop; `producer_floor.py`).
- opt in with `--paths`: `drainer_driver` (the sink's `producer: driver`) and `server_task`
  (a prototype: one transactional producer in one Python task on the Spark server).

Each path is warmed by a small run first (`--warmup` records, its own topics); rounds rotate
the order. Results: `benchmarks/results/kafka_sink-<N>.json` (charts.py draws them).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any

import fair
import readback
from common import delete_at_exit, fresh_drain, produce

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
    return {"wall_s": wall, "phases": result.phases, "out": out, "producer": producer_ran}


def run_drainer_driver(src: Any, records: int) -> dict[str, Any]:
    return run_drainer(src, records, producer="driver")


def read_options(src: Any, tuned: bool) -> dict[str, str]:
    """drainer's read options for the source's ranges, or none (Spark's defaults)."""
    return fair.drain_read_options(src) if tuned else {}


def producer_options(tuned: bool) -> dict[str, str]:
    """drainer's Kafka sink producer settings as Spark's sink takes them, or none."""
    if not tuned:
        return {}
    return {f"kafka.{k}": v for k, v in fair.drainer_java_producer_settings().items()}


def with_source_header(read: Any) -> Any:
    """Key, value and headers with `drainer.source` (`topic/partition/offset`) added, as
    drainer's sink writes it: what the read-back counts."""
    from pyspark.sql import functions as F

    source = F.struct(
        F.lit(readback.SOURCE_HEADER).alias("key"),
        F.concat_ws("/", "topic", "partition", "offset").cast("binary").alias("value"),
    )
    headers = F.concat(
        F.coalesce("headers", F.array().cast("array<struct<key:string,value:binary>>")),
        F.array(source),
    )
    return read.select("key", "value", headers.alias("headers"))


def spark_sink(src: Any, tuned: bool) -> dict[str, Any]:
    from spark_jobs.session import get_spark

    spark = get_spark(load_settings())
    out = create_topic()
    read = fair.bounded_read(spark, src, read_options(src, tuned))  # planned before the clock
    started = time.perf_counter()
    (
        with_source_header(read)
        .write.format("kafka")
        .mode("append")  # Kafka's V2 writer, which drainer's session uses, takes only append
        .option("kafka.bootstrap.servers", _bootstrap())
        .option("topic", out)
        .options(**producer_options(tuned))
        .save()
    )
    return {"wall_s": time.perf_counter() - started, "out": out}


def run_spark_sink_tuned(src: Any, records: int) -> dict[str, Any]:
    return spark_sink(src, tuned=True)


def run_spark_sink(src: Any, records: int) -> dict[str, Any]:
    return spark_sink(src, tuned=False)


def txn_loop_settings(tuned: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(consumer, producer) settings of the loop beyond what it needs to work."""
    if not tuned:
        return {}, {}
    return fair.drainer_consumer_settings(), fair.drainer_producer_settings()


def txn_loop(src: Any, records: int, tuned: bool) -> dict[str, Any]:
    """Kafka's transactional consume-process-produce loop, in one Python process."""
    from confluent_kafka import Consumer, Producer

    out = create_topic()
    group = f"bench-loop-{uuid.uuid4().hex[:8]}"
    consumer_extra, producer_extra = txn_loop_settings(tuned)
    consumer = Consumer(
        {
            "bootstrap.servers": _bootstrap(),
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **consumer_extra,
        }
    )
    producer = Producer(
        {"bootstrap.servers": _bootstrap(), "transactional.id": group, **producer_extra}
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
            source = f"{msg.topic()}/{msg.partition()}/{msg.offset()}".encode()
            headers = [*(msg.headers() or []), (readback.SOURCE_HEADER, source)]
            while True:
                try:
                    producer.produce(out, msg.value(), msg.key(), headers=headers)
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
    return {"wall_s": wall, "out": out}


def run_txn_loop_tuned(src: Any, records: int) -> dict[str, Any]:
    return txn_loop(src, records, tuned=True)


def run_txn_loop(src: Any, records: int) -> dict[str, Any]:
    return txn_loop(src, records, tuned=False)


def limit_spark_noop(src: Any, records: int) -> dict[str, Any]:
    """Spark reading the same ranges, with drainer's read options, into `noop`."""
    from spark_jobs.session import get_spark

    return fair.limit_noop(get_spark(load_settings()), src, records)


def limit_consumer(src: Any, records: int) -> dict[str, Any]:
    """A bare confluent-kafka consumer taking the same records (assigned, to their ends)."""
    from confluent_kafka import Consumer, TopicPartition

    assign, start, end = fair.kafka_ranges(src)
    consumer = Consumer(
        {
            "bootstrap.servers": _bootstrap(),
            "group.id": f"bench-floor-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            **fair.drainer_consumer_settings(),
        }
    )
    ends = {(t, p): end[t][str(p)] for t, ps in assign.items() for p in ps if end[t][str(p)] > 0}
    started = time.perf_counter()
    consumer.assign(
        [TopicPartition(t, p, start[t][str(p)]) for t, p in ends if start[t][str(p)] < ends[t, p]]
    )
    ends = {k: v for k, v in ends.items() if start[k[0]][str(k[1])] < v}
    taken = 0
    while ends:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                continue
            taken += 1
            key = (msg.topic(), msg.partition())
            if msg.offset() + 1 >= ends.get(key, 1 << 62):
                ends.pop(key, None)
    wall = time.perf_counter() - started
    consumer.close()
    assert taken == records, f"the bare consumer took {taken} of {records} records"
    return {"wall_s": wall}


def limit_spark_from_memory(src: Any, records: int) -> dict[str, Any]:
    """Spark writing the same rows (key, value, headers with the source), cached in memory
    first, into a topic with drainer's producer settings: the sink's share alone."""
    from spark_jobs.session import get_spark

    spark = get_spark(load_settings())
    out = create_topic()
    rows = with_source_header(fair.bounded_read(spark, src, read_options(src, tuned=True))).cache()
    try:
        assert rows.count() == records  # materialized before the clock starts
        started = time.perf_counter()
        (
            rows.write.format("kafka")
            .mode("append")
            .option("kafka.bootstrap.servers", _bootstrap())
            .option("topic", out)
            .options(**producer_options(tuned=True))
            .save()
        )
        wall = time.perf_counter() - started
    finally:
        rows.unpersist()
    return {"wall_s": wall, "out": out}


def limit_producer(src: Any, records: int) -> dict[str, Any]:
    """One transaction of N records already in memory, drainer's producer settings: the JVM
    producer where a JDK is (the server producer's floor), else drainer's Python loop."""
    import producer_floor

    from drainer.spark.javac import has_jdk

    rounds = (producer_floor.jvm_rounds if has_jdk() else producer_floor.python_rounds)(records, 2)
    return {"wall_s": rounds[-1]["wall_s"]}  # the first warms the path


def run_server_task(src: Any, records: int) -> dict[str, Any]:
    """A prototype, not drainer: the one transactional producer in one Python task on the
    Spark server (`coalesce(1)` + `mapInArrow`), so no row crosses to the driver. Same producer
    settings and the same two headers per record as drainer's sink; no marker, lease or
    Postgres (it measures the data path only). Opt in with `--paths ...,server_task`."""
    from pyspark.sql import functions as F

    from spark_jobs.session import get_spark

    spark = get_spark(load_settings())
    out = create_topic()
    bootstrap, tid = _bootstrap(), f"bench-task-{uuid.uuid4().hex[:8]}"
    defaults = fair.drainer_producer_settings()  # the task gets a copy with its function

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

    read = fair.bounded_read(spark, src, read_options(src, tuned=True))
    started = time.perf_counter()
    rows = read.select(
        "value",
        "key",
        F.concat_ws("/", "topic", "partition", "offset").cast("binary").alias("source"),
    )
    produced = rows.coalesce(1).mapInArrow(produce_all, "n long").collect()
    wall = time.perf_counter() - started
    assert sum(r.n for r in produced) == records, produced
    return {"wall_s": wall, "out": out}


def contenders(src: Any) -> dict[str, tuple[fair.Contender, Any]]:
    """Every path with the settings it runs with (beyond bootstrap servers and the names of
    its topics, groups and transactions), and its function."""
    from drainer.spark.javac import has_jdk

    reads, produces = read_options(src, tuned=True), producer_options(tuned=True)
    loop_consumer, loop_producer = txn_loop_settings(tuned=True)
    ours = {**reads, **produces, **{f"librdkafka.{k}": v for k, v in PRODUCER.items()}}
    floor = "JVM KafkaProducer" if has_jdk() else "drainer's Python produce loop"
    C = fair.Contender
    return {
        "drainer": (
            C("drainer", fair.DRAINER, "drainer run, sink kafka, producer auto", ours),
            run_drainer,
        ),
        "spark_kafka_sink_tuned": (
            C("spark_kafka_sink_tuned", fair.TUNED, "Spark's Kafka sink", {**reads, **produces}),
            run_spark_sink_tuned,
        ),
        "spark_kafka_sink": (
            C("spark_kafka_sink", fair.DEFAULT, "Spark's Kafka sink"),
            run_spark_sink,
        ),
        "txn_loop_tuned": (
            C(
                "txn_loop_tuned",
                fair.TUNED,
                "confluent-kafka transactional loop",
                {**loop_consumer, **loop_producer},
            ),
            run_txn_loop_tuned,
        ),
        "txn_loop": (
            C("txn_loop", fair.DEFAULT, "confluent-kafka transactional loop"),
            run_txn_loop,
        ),
        "limit_spark_noop": (fair.noop_contender(src), limit_spark_noop),
        "limit_consumer": (
            C(
                "limit_consumer",
                fair.LIMIT,
                "a bare confluent-kafka consumer taking the records",
                fair.drainer_consumer_settings(),
            ),
            limit_consumer,
        ),
        "limit_spark_from_memory": (
            C(
                "limit_spark_from_memory",
                fair.LIMIT,
                "Spark writing the rows, cached, into a topic",
                produces,
            ),
            limit_spark_from_memory,
        ),
        "limit_producer": (
            C(
                "limit_producer",
                fair.LIMIT,
                f"one transaction of the records in memory ({floor})",
                fair.drainer_producer_settings(),
            ),
            limit_producer,
        ),
        "drainer_driver": (
            C("drainer_driver", fair.DRAINER, "drainer run, producer driver", ours),
            run_drainer_driver,
        ),
        "server_task": (
            C("server_task", fair.TUNED, "prototype: one producer in one Spark task", reads),
            run_server_task,
        ),
    }


DEFAULT_PATHS = [
    "drainer",
    "spark_kafka_sink_tuned",
    "spark_kafka_sink",
    "txn_loop_tuned",
    "txn_loop",
    "limit_spark_noop",
    "limit_consumer",
    "limit_spark_from_memory",
    "limit_producer",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--paths",
        default=",".join(DEFAULT_PATHS),
        help="comma-separated, of: " + ", ".join([*DEFAULT_PATHS, "drainer_driver", "server_task"]),
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
    warm = source(args.warmup)
    known = contenders(warm)
    names = args.paths.split(",")
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"--paths: unknown {unknown}; choose from {', '.join(known)}", file=sys.stderr)
        return 2
    for name in names:
        known[name][1](warm, args.warmup)
    src = source(args.records)
    expected = fair.Expected.of_drain(src)
    paths = contenders(src)
    walls: dict[str, list[float]] = {name: [] for name in names}
    runs: list[dict[str, Any]] = []
    for round_ in range(args.repeat):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            got = paths[name][1](src, args.records)
            if "out" in got:  # read back by source coordinates, read_committed
                expected.check(name, readback.kafka(got["out"], expected))
            walls[name].append(got["wall_s"])
            runs.append({"path": name, "round": round_, **got})
            ran = f" (producer: {got['producer']})" if got.get("producer") else ""
            checked = ", read back" if "out" in got else ""
            print(f"{name} {got['wall_s']:.2f} s{ran}{checked}", flush=True)
    rows = fair.report("Kafka sink", args.records, [paths[n][0] for n in names], walls)
    for row in rows:
        row["sink"] = "kafka"
        phases = [r["phases"] for r in runs if r["path"] == row["path"] and r.get("phases")]
        if phases:  # a drainer path's: where its time goes (charts.py draws them)
            row["phases"] = {k: fair.median([p.get(k, 0.0) for p in phases]) for k in phases[0]}
    fair.write_results(
        "kafka_sink",
        {"records": args.records, "repeat": args.repeat, "rows": rows, "runs": runs},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
