"""What one transactional producer costs with Spark out of the picture: drainer's produce loop
(confluent-kafka) against the JVM's KafkaProducer on the same records (issue 27).

  .venv/bin/python benchmarks/producer_floor.py      # --records 1000000 --repeat 5

Both produce N records already in memory (100-byte values over 1,000 keys, and the two headers
drainer's Kafka sink gives every record: the run and `drainer.source`) into a 4-partition topic
in one transaction per round, with the sink's producer settings (`OUTPUT_PRODUCER_DEFAULTS`):

- `python`: `drainer.sinks.kafka.out_batches.send_batch`, the sink's own loop, over batches of 10,000.
- `jvm`: `benchmarks/jvm/TxnProducerFloor.java`, built with `javac` against the kafka-clients
  jar drainer already downloads for Spark: what a producer on the Spark server would cost.

Each round is timed from `begin_transaction` to a returned `commit_transaction`; CPU is the
whole process's (librdkafka's and the JVM's own threads included). A first round warms each
path (the JIT, the broker's log segments) and is not counted. Needs the broker (`drainer
services up`) and a JDK for the `jvm` path.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import fair
from kafka_sink import create_topic

BATCH = 10_000
RUN = b"123:0123456789abcdef:1"


def records(n: int) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """Values, keys and `drainer.source` headers, as TxnProducerFloor.java builds them."""
    values = [b"x" * 100 + str(i).encode() for i in range(n)]
    keys = [f"key-{i % 1000}".encode() for i in range(n)]
    sources = [f"bench-{i % 3}/{i % 4}/{i}".encode() for i in range(n)]
    return values, keys, sources


def producer_settings() -> dict[str, Any]:
    from drainer.settings import load_settings

    return {
        "bootstrap.servers": load_settings().bootstrap_servers,
        **fair.drainer_producer_settings(),
    }


def python_rounds(n: int, rounds: int) -> list[dict[str, float]]:
    from confluent_kafka import Producer

    from drainer.sinks.kafka.out_batches import OutBatch, send_batch
    from drainer.sinks.kafka.protocol import RUN_HEADER

    topic = create_topic()
    values, keys, sources = records(n)
    batches = [
        OutBatch(values[i : i + BATCH], keys[i : i + BATCH], sources=sources[i : i + BATCH])
        for i in range(0, n, BATCH)
    ]
    errors: list[Any] = []
    producer = Producer(
        {
            **producer_settings(),
            "transactional.id": f"floor-{topic}",
            # as the sink's RunTransaction asks: a delivery report per failed record only
            "delivery.report.only.error": True,
            "on_delivery": lambda err, msg: errors.append(err),
        }
    )
    producer.init_transactions(30)

    def failed(error: Any, source: str | None, to: str) -> Exception:
        return RuntimeError(f"{to}: {error} ({source})")

    out = []
    for _ in range(rounds):
        cpu, wall = _cpu(), time.perf_counter()
        producer.begin_transaction()
        produced: Counter[str] = Counter()
        for batch in batches:
            send_batch(
                producer.produce, producer.poll, batch, topic, {topic}, [(RUN_HEADER, RUN)],
                produced, failed,
            )  # fmt: skip
            producer.poll(0)
        producer.commit_transaction(60)
        out.append({"wall_s": time.perf_counter() - wall, "cpu_s": _cpu() - cpu})
        assert produced[topic] == n and not errors, errors[:3]
    return out


def jvm_rounds(n: int, rounds: int) -> list[dict[str, float]]:
    from jvm_build import build, jvm_producer_settings, kafka_clients_jar, pyspark_jars

    java = shutil.which("java")
    if java is None:
        sys.exit("the jvm path needs a JDK (java on PATH)")
    shipped = [
        next(pyspark_jars().glob(f"{name}-*.jar"))
        for name in ("lz4-java", "slf4j-api", "snappy-java", "zstd-jni")
    ]
    classpath = [kafka_clients_jar(), *shipped]
    built = build("TxnProducerFloor", classpath)
    done = subprocess.run(
        [
            java, "-Xmx2g", "-cp", ":".join(str(p) for p in [*classpath, built]),
            "TxnProducerFloor", producer_settings()["bootstrap.servers"], create_topic(), str(n),
            str(rounds), RUN.decode(), *(f"{k}={v}" for k, v in jvm_producer_settings().items()),
        ],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


PATHS = {"python": python_rounds, "jvm": jvm_rounds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--paths", default="python,jvm", help="comma-separated: python, jvm")
    args = parser.parse_args()
    summary: dict[str, Any] = {}
    for name in args.paths.split(","):
        rounds = PATHS[name](args.records, args.repeat + 1)[1:]  # the first warms the path
        summary[name] = {
            "wall_s": statistics.median(r["wall_s"] for r in rounds),
            "cpu_s": statistics.median(r["cpu_s"] for r in rounds),
            "rounds": rounds,
        }
        print(name, [round(r["wall_s"], 2) for r in rounds], flush=True)
    java = fair.drainer_java_producer_settings()
    paths = {
        "python": fair.Contender(
            "python", fair.LIMIT, "drainer's produce loop", producer_settings()
        ),
        "jvm": fair.Contender("jvm", fair.LIMIT, "the JVM's KafkaProducer", java),
    }
    rows = fair.report(
        "one producer's transaction",
        args.records,
        [paths[name] for name in summary],
        {name: [r["wall_s"] for r in s["rounds"]] for name, s in summary.items()},
    )
    for row in rows:
        row["cpu_s"] = round(summary[row["path"]]["cpu_s"], 3)
    fair.write_results(
        "producer_floor", {"records": args.records, "repeat": args.repeat, "rows": rows}
    )


if __name__ == "__main__":
    main()
