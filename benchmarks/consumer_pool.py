"""What the Connect server's pool of Kafka consumers holds after many reads, and when it lets go.

    .venv/bin/python benchmarks/consumer_pool.py      # --records 480000 --reads 20 --idle 150 480

Spark pools its Kafka consumers per (group id, partition) in the server's JVM; every read of a
new group (each query of Spark's own, each new drain) adds one per partition. N records are
produced into a fresh drain's topics (3 levels x 16 partitions: 48), then `--reads` bounded
reads of the first half of every partition go into `noop`, each a query with Spark's own group
id, as a new drain's run adds its consumers. Measured on the local server (`jcmd`, which runs a
full GC first, so the heap is what is live): the pool's consumers, the live heap and its byte
arrays, before the reads, right after them and at each of `--idle` seconds without a read.

The server runs with the pool settings drainer starts it with (drainer/services/connect.py), or
with `--server-conf KEY=VALUE ...` on top of them: the script then restarts the local server
with those, and at the end without them. Printed with the results: the server's pool settings.
Results: `benchmarks/results/consumer_pool-<N>.json` (`-server_conf` with `--server-conf`).
Needs the local server and a JDK.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
from typing import Any

import fair
from common import fresh_drain, produce

from drainer.services import connect
from drainer.settings import Settings, load_settings

RESULTS = fair.RESULTS
CONSUMER = "org.apache.kafka.clients.consumer.internals.ClassicKafkaConsumer"
# Spark's settings of its two Kafka pools, and their defaults
POOL_DEFAULTS = {
    "spark.kafka.consumer.cache.capacity": "64",
    "spark.kafka.consumer.cache.timeout": "5m",
    "spark.kafka.consumer.cache.evictorThreadRunInterval": "1m",
    "spark.kafka.consumer.fetchedData.cache.timeout": "5m",
    "spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval": "1m",
}


def restart_server(settings: Settings, conf: dict[str, str]) -> None:
    """The local Connect server stopped, then started with drainer's settings and `conf` over
    them (`up` keeps a running server whose settings differ)."""
    paths = connect.ConnectPaths.local(settings)
    connect.stop(settings, print, paths)  # waits for the port to be free
    connect.start(settings, paths, settings.connect_port, "local[*]", print, conf)


def server_heap(settings: Settings) -> dict[str, float]:
    """The local server's pooled consumers and live heap (MB), after the full GC `jcmd` runs."""
    pid = connect.ConnectPaths.local(settings).pid_file.read_text().strip()
    text = subprocess.run(
        ["jcmd", pid, "GC.class_histogram"], capture_output=True, text=True, check=True
    ).stdout
    consumers = re.search(rf"(\d+)\s+\d+\s+{re.escape(CONSUMER)}\s", text)
    arrays = re.search(r"\s(\d+)\s+(\d+)\s+\[B\s", text)
    total = re.search(r"Total\s+(\d+)\s+(\d+)", text)
    assert arrays and total, "jcmd's class histogram has no totals"
    return {
        "consumers": int(consumers[1]) if consumers else 0,
        "live_mb": round(int(total[2]) / 2**20, 1),
        "byte_arrays_mb": round(int(arrays[2]) / 2**20, 1),
    }


def read_halves(spark: Any, source: Any, reads: int) -> list[float]:
    """`reads` queries of the first half of every partition into noop; their wall times."""
    _, start, end = fair.kafka_ranges(source)
    half = {
        t: {p: start[t][p] + (end[t][p] - start[t][p]) // 2 for p in ps} for t, ps in end.items()
    }
    read = fair.bounded_read(spark, source, fair.drain_read_options(source), end=half)
    walls = []
    for i in range(reads):  # each save a query of its own: Spark's own group id, new consumers
        started = time.perf_counter()
        read.write.format("noop").mode("overwrite").save()
        walls.append(round(time.perf_counter() - started, 2))
        print(f"read {i + 1}/{reads}: {walls[-1]:.2f} s", flush=True)
    return walls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=480_000)
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument(
        "--idle", type=int, nargs="+", default=[150, 480], help="seconds without a read"
    )
    parser.add_argument("--server-conf", nargs="*", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    conf = dict(item.split("=", 1) for item in args.server_conf)
    from spark_jobs.session import get_spark

    settings = load_settings()
    if conf:
        restart_server(settings, conf)
    try:
        source = fresh_drain(args.records, levels=3, partitions=16)
        produce(source, args.records)
        spark = get_spark(settings)
        heap = {"before": server_heap(settings)}
        walls = read_halves(spark, source, args.reads)
        heap["after_reads"] = server_heap(settings)
        idle_from = time.monotonic()
        for seconds in sorted(args.idle):
            time.sleep(max(0.0, idle_from + seconds - time.monotonic()))
            heap[f"after_{seconds}_s_idle"] = server_heap(settings)
        pools = {k: spark.conf.get(k, None) or v for k, v in POOL_DEFAULTS.items()}
    finally:
        if conf:
            restart_server(settings, {})
    for when, seen in heap.items():
        print(
            f"{when:>22}: {seen['consumers']:5d} consumers, live heap {seen['live_mb']:7.1f} MB "
            f"(byte arrays {seen['byte_arrays_mb']:.1f} MB)"
        )
    print("server's pool settings: " + ", ".join(f"{k}={v}" for k, v in pools.items()))
    # a sitting on other settings keeps its own file: `-server_conf`
    out = RESULTS / f"consumer_pool-{args.records}{'-server_conf' if conf else ''}.json"
    out.write_text(
        json.dumps(
            {"reads": args.reads, "read_s": walls, "heap": heap, "settings": pools}, indent=2
        )
        + "\n"
    )
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
