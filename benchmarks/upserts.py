"""State tables (issue 48): drainer's `write: upsert` against the job a Spark user writes today.

  .venv/bin/python benchmarks/upserts.py      # --records 1000000 --keys 100000 --repeat 5

N JSON records `{id, name, v}` over K keys (`v` rising: every record is a newer version of its
key), spread over 3 levels x 2 partitions, are produced once. Into Delta and into Iceberg
(`--formats delta iceberg`), each round runs:

- `drainer_upsert_<fmt>`: a drain of its own (budget = the backlog: one run), the JSON value
  decoded, `sink: {write: upsert, order_by: [v]}`; timed: `spark_jobs.drain_job.run` whole.
- `streaming_merge_<fmt>`: the hand-written peer, `readStream` of the 3 level topics with
  drainer's read options (benchmarks/fair.py), the same JSON decoding, `foreachBatch` that
  keeps each key's newest row (`row_number` over the key by `v`) and runs `MERGE INTO` (newer
  `v` replaces, a new key is inserted), `trigger(availableNow=True)`, on the same session of
  the same warm Connect server.
- `drainer_upsert_<fmt>_peer_columns`: drainer's run writing the peer's table, the value's
  `id, name, v` keyed by `id` (`metadata_columns: []`, `primary_key: [id]`; the run still
  reads the records' level, partition and offset to break ties), plus the delete marker
  `_deleted_at`: the two paths' tables equal. The default run, `drainer_upsert_<fmt>`,
  writes the 7 columns of provenance (topic, partition, offset, timestamp, level, key,
  headers) besides, which the peer does not.
- `drainer_append_<fmt>`: the same records appended (`write: append`): the merge's cost.
- `limit_spark_noop`, once a round and shown in every table (the limit of this machine, same
  sitting): Spark reading the same ranges (the topics, partitions and offsets drainer's runs
  read) with drainer's read options into `noop`, the values decoded with `from_json` and
  SCHEMA, since every path decodes them (`fair.limit_noop`); its rows are counted, as it
  writes no table.

Both upsert paths start without a table and make it inside the timed run (drainer as its run
does, the peer with the `CREATE TABLE` a user's job runs before its stream): neither gets its
table made for free. `--into existing` adds the same two paths into a table that
already holds every key (an older version, `v = -1`), made before the timed run for both
(`<path>_existing`): there drainer merges (and counts against the table) as it does in every
run after a table's first.

Every table is read back without Spark (deltalake, pyiceberg): a state table must hold each
key once with its newest version (drainer's: the live rows, `_deleted_at` null); the append
table every record. A path whose table disagrees fails the benchmark (exit 1). Each path is
warmed by a small run first (`--warmup`); `--repeat` rounds (each starting one path later) give
medians. Results: `benchmarks/results/upserts-<N>.json`. Topics and tables are removed
afterwards unless `--keep`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import fair
from common import OUT, fresh_drain

from drainer.settings import load_settings

FORMATS = ("delta", "iceberg")
FOLDER = "bench_upserts"  # under the warehouse: Delta tables and the peer's checkpoints
SCHEMA = "id string, name string, v long"
LEVELS, PARTITIONS = 3, 2


def produce_versions(source: Any, records: int, keys: int) -> dict[str, int]:
    """Record i is version v=i of key i % keys, on a random level; returns key -> newest v."""
    import random

    from confluent_kafka import Producer

    rng = random.Random(48)
    producer = Producer({"bootstrap.servers": load_settings().bootstrap_servers, "linger.ms": 50})
    newest: dict[str, int] = {}
    for i in range(records):
        key = f"k{i % keys:06d}"
        value = json.dumps({"id": key, "name": f"{key}-v{i}", "v": i}).encode()
        level = rng.randrange(LEVELS)
        producer.produce(source.level_topic(level), key=key.encode(), value=value)
        newest[key] = i
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return newest


def sink_of(fmt: str, name: str, write: str) -> dict[str, Any]:
    where = {"path": f"{FOLDER}/{name}"} if fmt == "delta" else {"table": f"bench.{name}"}
    upsert = {"write": "upsert", "order_by": ["v"]} if write == "upsert" else {}
    return {"type": fmt, **where, **upsert}


def location(fmt: str, sink: dict[str, Any]) -> str:
    if fmt == "iceberg":
        return str(sink["table"])
    return str(Path(load_settings().warehouse) / sink["path"])


# the columns of drainer's state table of SCHEMA's records: the value's, the metadata's
# (drainer.config.formats.METADATA_COLUMNS) and the delete marker's; an Iceberg state table
# keeps the Kafka partition as `_kafka_partition` (spark_jobs.sinks.iceberg_upsert)
DRAINER_COLUMNS = (
    "id string, name string, v long, _topic string, _partition int, _offset long, "
    "_timestamp timestamp, _level int, _key string, _headers string, _deleted_at timestamp"
)
ICEBERG_COLUMNS = DRAINER_COLUMNS.replace("_partition int", "_kafka_partition int")
# drainer's state table of the peer's columns (`metadata_columns: []`)
VALUE_COLUMNS = f"{SCHEMA}, _deleted_at timestamp"
LEAN = "_peer_columns"  # the name's end of a path whose drainer run writes VALUE_COLUMNS


def older_versions(spark: Any, keys: int, columns: str) -> Any:
    """An older version (`v = -1`) of each of the `keys` keys, in `columns`."""
    from pyspark.sql import functions as F

    values = {
        "id": F.format_string("k%06d", F.col("id")),
        "v": F.lit(-1),
        "_key": F.format_string("k%06d", F.col("id")),
    }
    return spark.range(keys).select(
        *[
            values.get(n, F.concat(F.lit("old-"), F.col("id")) if n == "name" else F.lit(None))
            .cast(t)
            .alias(n)
            for n, t in (c.split() for c in columns.split(", "))
        ]
    )


def filled(spark: Any, fmt: str, target: str, keys: int, drain: Any = None) -> None:
    """`target` made with an older version of each of the `keys` keys: the peer's table in
    SCHEMA's columns; with `drain`, drainer's state table as its first run makes it (its
    columns, its key recorded; Iceberg's with drainer's own DDL and properties)."""
    if fmt == "iceberg":
        spark.sql("CREATE NAMESPACE IF NOT EXISTS drainer.bench")
    if drain is None:
        rows = older_versions(spark, keys, SCHEMA)
        made = rows.writeTo(target).using(fmt)
        made = made.tableProperty("format-version", "2") if fmt == "iceberg" else made
        made.create()
        return
    from drainer.sinks.upsert import KEY_PROPERTY, upsert_spec

    spec = upsert_spec(drain.sink)
    lean = drain.metadata_columns == []
    if fmt == "delta":
        rows = older_versions(spark, keys, VALUE_COLUMNS if lean else DRAINER_COLUMNS)
        rows.writeTo(target).using("delta").tableProperty(
            KEY_PROPERTY, spec.key_property()
        ).create()
        return
    from spark_jobs.sinks.iceberg_upsert import _create

    rows = older_versions(spark, keys, VALUE_COLUMNS if lean else ICEBERG_COLUMNS)
    _create(spark, target, rows, spec)
    rows.writeTo(target).append()


def run_drainer(
    source: Any, records: int, fmt: str, write: str, keys: int = 0, lean: bool = False
) -> tuple[float, str]:
    """drainer's run, timed whole; `keys`: into a table already holding them (made untimed);
    `lean`: the peer's columns only (VALUE_COLUMNS)."""
    from spark_jobs import drain_job
    from spark_jobs.session import get_spark
    from spark_jobs.sinks import spark_sink_for

    name = f"bench_up_{uuid.uuid4().hex[:8]}"
    sink = sink_of(fmt, name, write)
    drain = fresh_drain(
        records,
        levels=LEVELS,
        partitions=PARTITIONS,
        name=name,
        topic=source.topic,
        value={"format": "json", "schema": SCHEMA},
        key={"format": "string"},
        # the value's columns: keyed by `id`, the peer's key (drainer's `_key` default is gone)
        sink={**sink, "primary_key": ["id"]} if lean else sink,
        **({"metadata_columns": []} if lean else {}),
    )
    settings = load_settings()
    if keys:  # the session the run gets: with the sink's catalog
        conf = spark_sink_for(drain.sink, settings, drain.name).session_conf()
        target = f"delta.`{location(fmt, sink)}`" if fmt == "delta" else f"drainer.{sink['table']}"
        filled(get_spark(settings, sink_conf=conf), fmt, target, keys, drain)
    started = time.perf_counter()
    result = drain_job.run(drain, trigger="bench", settings=settings)
    wall = time.perf_counter() - started
    assert result.drained == records, f"{name} drained {result.drained} of {records}"
    (OUT / f"{name}.yaml").unlink(missing_ok=True)
    return wall, location(fmt, sink)


def run_peer(spark: Any, source: Any, fmt: str, keys: int = 0) -> tuple[float, str]:
    """Structured Streaming, foreachBatch: each micro-batch deduplicated by key (newest `v`),
    then `MERGE INTO` the table, which the job creates first, empty (timed with the stream, as
    drainer's run makes its table); `keys`: into a table already holding them (made untimed)."""
    from pyspark.sql import functions as F

    name = f"bench_peer_{uuid.uuid4().hex[:8]}"
    if fmt == "delta":
        where = location("delta", {"path": f"{FOLDER}/{name}"})
        target = f"delta.`{where}`"
    else:
        where = f"bench.{name}"
        target = f"drainer.{where}"
    if keys:
        filled(spark, fmt, target, keys)
    started = time.perf_counter()
    if fmt == "delta" and not keys:
        spark.createDataFrame([], SCHEMA).write.format("delta").save(where)
    elif fmt == "iceberg" and not keys:
        spark.sql("CREATE NAMESPACE IF NOT EXISTS drainer.bench")
        spark.sql(
            f"CREATE TABLE drainer.{where} ({SCHEMA}) USING iceberg "
            "TBLPROPERTIES ('format-version' = '2')"
        )
    topics = ",".join(source.level_topic(level) for level in range(LEVELS))
    reads = fair.drain_read_options(source)

    def merge_batch(batch: Any, batch_id: int) -> None:  # runs on the server's Python worker
        from pyspark.sql import Window
        from pyspark.sql import functions as G

        newest = Window.partitionBy("id").orderBy(G.col("v").desc())
        rows = batch.withColumn("_n", G.row_number().over(newest)).where("_n = 1").drop("_n")
        rows.sparkSession.sql(
            f"MERGE INTO {target} t USING {{src}} s ON t.id = s.id "
            "WHEN MATCHED AND s.v > t.v THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
            src=rows,
        ).collect()

    checkpoint = location("delta", {"path": f"{FOLDER}/_checkpoints/{name}"})
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", load_settings().bootstrap_servers)
        .option("subscribe", topics)
        .option("startingOffsets", "earliest")
        .options(**reads)
        .load()
        .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r"))
        .select("r.*")
        .writeStream.option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .foreachBatch(merge_batch)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - started
    shutil.rmtree(checkpoint, ignore_errors=True)
    return wall, where


def read_back(fmt: str, where: str, live_only: bool) -> list[dict[str, Any]]:
    """The table's rows without Spark (drainer's state tables: the live ones)."""
    if fmt == "delta":
        from deltalake import DeltaTable

        table = DeltaTable(where).to_pyarrow_table()
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("drainer", uri=load_settings().database_url)
        table = catalog.load_table(where).scan().to_arrow()
    rows = table.select(["id", "v", *(["_deleted_at"] if live_only else [])]).to_pylist()
    return [r for r in rows if not live_only or r["_deleted_at"] is None]


def check(path: str, rows: list[dict[str, Any]], newest: dict[str, int], append: int) -> None:
    if append:  # every record once
        if len(rows) != append:
            sys.exit(f"{path}: {len(rows)} rows read back, expected {append}")
        return
    found = {r["id"]: r["v"] for r in rows}
    if len(rows) != len(newest) or found != newest:
        wrong = sum(found.get(k) != v for k, v in newest.items())
        sys.exit(f"{path}: {len(rows)} rows for {len(newest)} keys, {wrong} not the newest")


def drop(spark: Any, fmt: str, where: str) -> None:
    if fmt == "iceberg":
        spark.sql(f"DROP TABLE IF EXISTS drainer.{where} PURGE")
        shutil.rmtree(Path(load_settings().warehouse, *where.split(".")), ignore_errors=True)
    else:
        shutil.rmtree(where, ignore_errors=True)


def paths(formats: list[str], into: list[str]) -> list[tuple[str, str, str, bool]]:
    """(name, kind, format, into an existing table) of every path of a sitting; the limit's
    format is "": it reads the ranges, the same for every table. A `_peer_columns` path is
    drainer's run writing the peer's columns."""
    out = [(fair.LIMIT_NOOP, fair.LIMIT, "", False)]
    for fmt in formats:
        for existing in (False, True):
            if ("existing" if existing else "new") not in into:
                continue
            at = "_existing" if existing else ""
            out.append((f"drainer_upsert_{fmt}{at}", fair.DRAINER, fmt, existing))
            out.append((f"drainer_upsert_{fmt}{at}{LEAN}", fair.DRAINER, fmt, existing))
            out.append((f"streaming_merge_{fmt}{at}", fair.TUNED, fmt, existing))
            if not existing:
                out.append((f"drainer_append_{fmt}", fair.LIMIT, fmt, False))
    return out


def contender(name: str, kind: str, fmt: str, existing: bool) -> fair.Contender:
    reads = fair.drainer_read_options(LEVELS * PARTITIONS, fair.spark_cores())
    table = ", into a table holding every key" if existing else ""
    if kind == fair.DRAINER:
        columns = (
            ", the peer's columns (metadata_columns: [], primary_key: [id])"
            if name.endswith(LEAN)
            else ", drainer's 7 metadata columns besides"
        )
        what = f"drainer run, {fmt} write: upsert{table}{columns}"
        return fair.Contender(name, kind, what, reads)
    if kind == fair.TUNED:
        what = f"AvailableNow foreachBatch: row_number dedupe by key, MERGE INTO {fmt}{table}"
        return fair.Contender(name, kind, what, reads)
    return fair.Contender(name, kind, f"drainer run, {fmt} write: append (the merge's cost)")


def one_size(
    records: int,
    keys: int,
    formats: list[str],
    into: list[str],
    repeat: int,
    warmup: int,
    keep: bool,
):
    from spark_jobs.session import get_spark
    from tests.support.drains import delete_topics

    sources = []

    def produced(count: int) -> tuple[Any, dict[str, int]]:
        source = fresh_drain(count, levels=LEVELS, partitions=PARTITIONS)  # its topics only
        sources.append(source)
        return source, produce_versions(source, count, min(keys, count))

    warm, warm_newest = produced(warmup)
    source, newest = produced(records)
    spark = get_spark(load_settings())
    made: list[tuple[str, str]] = []

    def timed(path: tuple[str, str, str, bool], topics: Any, count: int, model: dict) -> float:
        name, kind, fmt, existing = path
        filled_keys = len(model) if existing else 0
        # the session handed out last: a drainer run whose sink needs session settings
        # (Iceberg's catalog) may have replaced the one this sitting started with
        if name == fair.LIMIT_NOOP:  # no table: it counts the rows it read and decoded
            return fair.limit_noop(get_spark(load_settings()), topics, count, SCHEMA)["wall_s"]
        if kind == fair.TUNED:
            wall, where = run_peer(get_spark(load_settings()), topics, fmt, filled_keys)
        else:
            write = "upsert" if kind == fair.DRAINER else ""
            lean = name.endswith(LEAN)
            wall, where = run_drainer(topics, count, fmt, write, filled_keys, lean)
        made.append((fmt, where))
        rows = read_back(fmt, where, live_only=kind == fair.DRAINER)
        check(name, rows, model, count if kind == fair.LIMIT else 0)
        return wall

    sitting = paths(formats, into)
    for path in sitting:  # warm: classes loaded, the JIT at work
        timed(path, warm, warmup, warm_newest)
    walls: dict[str, list[float]] = {p[0]: [] for p in sitting}
    for round_ in range(repeat):
        shift = round_ % len(sitting)
        for path in sitting[shift:] + sitting[:shift]:
            wall = timed(path, source, records, newest)
            walls[path[0]].append(wall)
            checked = "rows counted" if path[0] == fair.LIMIT_NOOP else "read back"
            print(f"{records:,} {path[0]}: {wall:.2f} s, {checked}", file=sys.stderr)
    rows = []
    for fmt in formats:  # drainer's ratio to each path of its own format and table, the limit
        for existing in (False, True):
            mine = [p for p in sitting if p[2] == fmt and p[3] == existing]
            if not mine:
                continue
            table = f"{fmt}, {'an existing' if existing else 'a new'} table"
            shown = [*mine, *(p for p in sitting if p[0] == fair.LIMIT_NOOP)]
            found = fair.report(
                f"state tables, {table}",
                records,
                [
                    fair.noop_contender(source, SCHEMA)
                    if p[0] == fair.LIMIT_NOOP
                    else contender(*p)
                    for p in shown
                ],
                {p[0]: walls[p[0]] for p in shown},
            )
            rows += [{**row, "table": table} for row in found]  # the limit's row in each
    if not keep:
        for fmt, where in made:
            drop(spark, fmt, where)
        for topics in sources:
            delete_topics(topics)
    return {"records": records, "keys": keys, "into": into, "repeat": repeat, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument(
        "--into",
        nargs="+",
        choices=("new", "existing"),
        default=["new", "existing"],
        help="a table each run makes, and one already holding every key",
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--keep", action="store_true", help="leave topics and tables")
    args = parser.parse_args()
    from drainer import services

    # every format's jars before the sitting: a server started without Iceberg's restarted when
    # the first Iceberg drain was made, mid-sitting, and the peer's session died with it
    formats = ("delta", "iceberg") if "iceberg" in args.formats else ("delta",)
    services.up(load_settings(), echo=lambda *_: None, formats=formats)
    result = one_size(
        args.records,
        args.keys,
        args.formats,
        args.into,
        args.repeat,
        args.warmup,
        args.keep,
    )
    fair.write_results("upserts", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
