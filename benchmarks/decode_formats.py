"""The cost of decoding: 1M Avro and 1M Protobuf records into Delta, decoded vs raw (issue 28).

  .venv/bin/python benchmarks/decode_formats.py   # --records 1000000 --repeat 1 --formats avro,protobuf

N records of an `Order` (string id, double amount, int qty, optional string note; about 30
bytes each) are produced once per format to one level topic of 4 partitions by `drainer
produce` (the drain's declared format, so synthetic values follow the schema). Then, on the
same warm Spark Connect server, each path reads all N from Kafka and appends them to a fresh
Delta table:

- `avro decoded`: a drain with `value: {format: avro, schema: order.avsc}` and no processor
  (typed rows plus the metadata columns), timed as `spark_jobs.drain_job.run` whole (plan,
  Spark read + decode + write, table commit, Postgres commit, Kafka mirror);
- `avro raw`: the same drain without `value` (the value as bytes plus the same metadata);
- `avro from_avro tuned` / `avro from_avro`: the hand-written job: `spark.read.format("kafka")`
  of the topic from earliest to latest, `from_avro(value, schema)` and the same metadata
  columns, `write.format("delta")`, timed from building the read to the write returning (no
  plan, no commit, no mirror), with drainer's read options (`fair.py`) / Spark's defaults;
- `protobuf decoded`: a drain with `value: {format: protobuf, schema: order.desc, message:
  shop.Order}` (decoded in Python in Arrow batches, `mapInArrow`: no spark-protobuf jar here);
- `protobuf raw`: the same drain without `value`, on the Protobuf topic.

The drains are the ones the record-format tests drain (`tests.support.drains`: the `Order` schemas,
`typed_drain`, `typed_sink`). Every path is warmed by a run of its own on a 10,000-record topic
first; each table is read back with deltalake by distinct source coordinates
(`readback.py`): a table that is not exactly the N records, each once, exits 1. Every path's
settings are printed with the results (`benchmarks/results/decode_formats-<N>.json`). The
topics are deleted afterwards unless `--keep`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fair
import readback
from common import OUT, fresh_drain

from drainer.settings import load_settings


def produce(drain_name: str, records: int) -> None:
    import subprocess

    cmd = [sys.executable, "-m", "spark_jobs.cli", "produce", drain_name, "--count", str(records)]
    subprocess.run(cmd, check=True, capture_output=True)


def drain_path(topic_drain: Any, value: dict[str, Any] | None) -> tuple[float, Path]:
    """A fresh drain on `topic_drain`'s topic (decoded as `value`, else raw), one timed run."""
    from drainer import services
    from drainer.settings import set_config_path
    from spark_jobs import drain_job
    from tests.support.drains import create_drain, typed_drain, typed_sink

    suffix = uuid.uuid4().hex[:8]
    drain, config = create_drain(
        OUT,
        prefix="bench_dec",
        topic=topic_drain.topic,
        levels=1,
        partitions=4,
        budget=topic_drain.budget,
        **typed_drain(value, typed_sink("delta", f"bench_decode/{suffix}")),
    )
    set_config_path(config)
    # a Connect server with the Delta jars: this drain's file
    services.up(load_settings(), echo=lambda *_: None)
    t0 = time.perf_counter()
    drain_job.run(drain.name, trigger="bench", settings=load_settings())
    seconds = time.perf_counter() - t0
    return seconds, Path(load_settings().warehouse) / "bench_decode" / suffix


def hand_written(topic: str, avsc: Path, tuned: bool) -> tuple[float, Path]:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from spark_jobs.session import get_spark

    settings = load_settings()
    spark = get_spark(settings, check=True)
    path = Path(settings.warehouse) / "bench_decode" / f"hand_{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", f"{topic}-0")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .options(**read_options(tuned))
        .load()
    )
    decoded = df.select(
        from_avro("value", avsc.read_text()).alias("v"),
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.col("timestamp").alias("_timestamp"),
        F.col("key").alias("_key"),
    ).select("v.*", "_topic", "_partition", "_offset", "_timestamp", "_key")
    decoded.write.format("delta").mode("append").save(str(path))
    return time.perf_counter() - t0, path


def read_options(tuned: bool) -> dict[str, str]:
    """drainer's read options for one level topic's 4 partitions, or none."""
    return fair.drainer_read_options(PARTITIONS, fair.spark_cores()) if tuned else {}


PARTITIONS = 4


def value_formats() -> dict[str, dict[str, Any]]:
    """Each format's declared `value`, its schema file written under benchmarks/out."""
    from tests.support.drains import ORDER_AVRO_NOTE, ORDER_MESSAGE, write_descriptor_set

    avsc = OUT / "order.avsc"
    avsc.write_text(json.dumps(ORDER_AVRO_NOTE))
    desc = write_descriptor_set(OUT / "order.desc", "with_note")
    return {
        "avro": {"format": "avro", "schema": str(avsc)},
        "protobuf": {"format": "protobuf", "schema": str(desc), "message": ORDER_MESSAGE},
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=10_000)
    parser.add_argument("--formats", default="avro,protobuf", help="comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the topics afterwards")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    values = {name: fmt for name, fmt in value_formats().items() if name in args.formats}

    topics: dict[tuple[str, str], Any] = {}
    for name, value in values.items():
        for role, count in (("warmup", args.warmup), ("timed", args.records)):
            drain = fresh_drain(count, levels=1, partitions=PARTITIONS, value=value, processor=None)
            t0 = time.perf_counter()
            produce(drain.name, count)
            seconds = time.perf_counter() - t0
            print(f"produced {count:,} {name} records to {drain.topic}-0 in {seconds:.1f} s")
            topics[(name, role)] = drain

    paths: dict[str, tuple[str, Callable[[Any], tuple[float, Path]]]] = {}
    contenders: list[fair.Contender] = []
    reads = read_options(tuned=True)
    for name, value in values.items():
        paths[f"{name} decoded"] = (name, lambda d, v=value: drain_path(d, v))
        paths[f"{name} raw"] = (name, lambda d: drain_path(d, None))
        contenders += [
            fair.Contender(f"{name} decoded", fair.DRAINER, f"drainer, value: {name}", reads),
            fair.Contender(f"{name} raw", fair.DRAINER, "drainer, the value as bytes", reads),
        ]
        if name == "avro":
            avsc = Path(value["schema"])
            paths["avro from_avro tuned"] = (
                name,
                lambda d, a=avsc: hand_written(d.topic, a, tuned=True),
            )
            paths["avro from_avro"] = (name, lambda d, a=avsc: hand_written(d.topic, a, False))
            contenders += [
                fair.Contender("avro from_avro tuned", fair.TUNED, "hand-written job", reads),
                fair.Contender("avro from_avro", fair.DEFAULT, "hand-written job"),
            ]
    times: dict[str, list[float]] = {path: [] for path in paths}
    for name, run in paths.values():  # warm every path on the small topic
        run(topics[(name, "warmup")])
    expected = {name: fair.Expected.of_drain(topics[(name, "timed")]) for name in values}
    for _ in range(args.repeat):
        for path, (name, run) in paths.items():
            seconds, table = run(topics[(name, "timed")])
            expected[name].check(path, readback.delta(str(table), prefix="_"))
            times[path].append(seconds)
            print(f"{path:>20}: {seconds:6.2f} s, read back", flush=True)
    rows = fair.report("decoding into Delta", args.records, contenders, times)
    fair.write_results(
        "decode_formats", {"records": args.records, "repeat": args.repeat, "rows": rows}
    )
    if not args.keep:
        from tests.support.drains import delete_topics

        for drain in topics.values():
            delete_topics(drain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
