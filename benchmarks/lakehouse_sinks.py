"""drainer's table sinks against the Structured Streaming job a Spark user writes instead, and
the limits of this machine (issues 17, 30 and 51).

  .venv/bin/python benchmarks/lakehouse_sinks.py      # --records 1000000 --repeat 5

Per size, N records (100-byte values over 1,000 keys, 3 levels x 4 partitions) are produced
once. Each sink (`--sinks postgres delta iceberg`) is written by:

- `<sink>` (drainer): a drain of its own (name, consumer group, table; budget = the backlog, so
  one run drains it all), dataframe mode with `spark_jobs.examples:one_row_per_record`; timed:
  `spark_jobs.drain_job.run` whole (plan, Spark read + write, table commit, Postgres commit,
  Kafka mirror).
- `streaming_<sink>_tuned` / `streaming_<sink>`: the hand-written job, `readStream` of the 3
  level topics (`subscribe`, `startingOffsets=earliest`), the same projection, into the same
  kind of table with a checkpoint and `trigger(availableNow=True)`, timed from building the
  query to `awaitTermination()` returning, on the same session of the same Connect server;
  with drainer's read options (`fetch.max.wait.ms`, `max.poll.records`, `minPartitions`) /
  with Spark's and Kafka's defaults. Postgres: the tuned job COPYs each micro-batch from its
  tasks (Arrow CSV through psycopg, as drainer's sink does), the default one appends it through
  Spark's JDBC writer (`reWriteBatchedInserts=true`, the documented way).
- limits, same sitting: `limit_spark_noop` (Spark reading the same ranges into `noop`, drainer's
  read options), `limit_consumer` (a bare confluent-kafka consumer taking the same records),
  `limit_<sink>_from_memory` (Spark writing the same rows, cached in memory first, into a fresh
  table of the sink's kind: Delta's and Iceberg's writers, COPY for Postgres).

Every table is read back without Spark (`readback`: deltalake, pyiceberg, psycopg) by distinct
source coordinates: a path whose table is not exactly the N records, each once, fails the
benchmark (exit 1). Every path is warmed by a small run of its own (`--warmup` records) before
anything is timed; `--repeat` rounds (each starting one path later) give medians.

Each size runs in a child process. The Spark JVM (the Connect server's; local mode) is shared by
all sizes, so it is measured around each drainer and streaming run: a full GC and a reset of the
peak RSS before it, the peak RSS and the heap after a full GC (`jcmd`) after it. Results:
`benchmarks/results/lakehouse_sinks-<N>.json` (charts.py draws them). Topics, tables and drains
files are removed afterwards unless `--keep`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import resource
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import fair
import readback
from common import OUT, fresh_drain, produce, vm_hwm_kb

from drainer.settings import load_settings

SINKS = ("postgres", "delta", "iceberg")
PROCESSOR = "spark_jobs.examples:one_row_per_record"
FOLDER = "bench_lakehouse"  # under the warehouse: the Delta tables and the baseline's checkpoints
PG_COLUMNS = (
    'topic text, partition integer, "offset" bigint, level integer, key text, value_size integer'
)


class Jvm:
    """The Spark JVM's memory around one timed run: peak RSS, and the heap after a full GC."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.jcmd = shutil.which("jcmd")
        self.heap_before_gc_mb: int | None = None

    def heap_after_gc_mb(self) -> int | None:
        """A full GC (what `System.gc()` does), then the heap in use (G1's `GC.heap_info`)."""
        if self.pid is None or self.jcmd is None:
            return None
        subprocess.run([self.jcmd, str(self.pid), "GC.run"], check=True, capture_output=True)
        info = subprocess.run(
            [self.jcmd, str(self.pid), "GC.heap_info"], check=True, capture_output=True, text=True
        ).stdout
        used = re.search(r"heap\s+total \d+K, used (\d+)K", info)
        return round(int(used.group(1)) / 1024) if used else None

    def rss_mb(self) -> int | None:
        if self.pid is None:
            return None
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024)
        return None

    def before(self) -> None:
        self.heap_before_gc_mb = self.heap_after_gc_mb()
        if self.pid is not None:
            # VmHWM := the current RSS (Linux >= 4.0): the peak read after the run is the run's
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def after(self) -> dict[str, int | None]:
        """Peak RSS during the run; heap after a GC before it (what the server held already)
        and after it (what the run left behind)."""
        peak = None if self.pid is None else round(vm_hwm_kb(self.pid) / 1024)
        return {
            "jvm_peak_rss_mb": peak,
            "jvm_heap_before_mb": self.heap_before_gc_mb,
            "jvm_heap_after_gc_mb": self.heap_after_gc_mb(),
        }


def jvm_pid() -> int | None:
    """The local Connect server's JVM, which runs the Spark jobs; None for SPARK_REMOTE's."""
    from drainer.services import connect, process
    from drainer.settings import load_settings

    settings = load_settings()
    if not settings.local_spark_connect:  # SPARK_REMOTE: another machine's, or not ours
        return None
    return process.our_pid(connect.ConnectPaths.local(settings).pid_file, connect.MARKER)


def sink_of(sink: str, name: str) -> dict[str, str]:
    if sink == "postgres":
        return {"type": "postgres", "table": f"{name}_out"}
    if sink == "delta":
        return {"type": "delta", "path": f"{FOLDER}/{name}"}
    return {"type": "iceberg", "table": f"bench.{name}"}


def drain_for(sink: str, source: Any, records: int) -> Any:
    """A fresh drain (own name, consumer group and table) reading the topics of `source`."""
    name = f"bench_{sink[:3]}_{uuid.uuid4().hex[:8]}"
    return fresh_drain(
        records, name=name, topic=source.topic, processor=PROCESSOR, sink=sink_of(sink, name)
    )


def delta_path(name: str) -> str:
    from drainer.config.sink_models import DeltaSinkConfig
    from drainer.settings import load_settings
    from drainer.sinks import sink_for

    return sink_for(DeltaSinkConfig(path=f"{FOLDER}/{name}"), load_settings()).location()


def table_of(what: str, drain: Any) -> str:
    """Where the read-back and `clean_up` find a drain's table."""
    return delta_path(drain.name) if what == "delta" else str(drain.sink.table)


def run_drainer(drain: Any, records: int, jvm: Jvm) -> dict[str, Any]:
    from spark_jobs import drain_job

    jvm.before()
    started = time.perf_counter()
    result = drain_job.run(drain, trigger="bench", settings=load_settings())
    wall = time.perf_counter() - started
    memory = jvm.after()
    assert result.drained == records, f"{drain.name} drained {result.drained} of {records}"
    return {
        "wall_s": round(wall, 2),
        "phases": {k: round(v, 2) for k, v in result.phases.items()},
        "files_added": result.table_commit.get("files_added"),
        **memory,
    }


def projection(records: Any) -> Any:
    """What `one_row_per_record` makes of drainer's read, from Spark's Kafka source rows."""
    from pyspark.sql import functions as F

    return records.select(
        "topic",
        "partition",
        "offset",
        F.substring_index("topic", "-", -1).cast("int").alias("level"),
        F.col("key").cast("string").alias("key"),
        F.length("value").alias("value_size"),
    )


def read_options(source: Any, tuned: bool) -> dict[str, str]:
    return fair.drain_read_options(source) if tuned else {}


def run_streaming(
    spark: Any, source: Any, table: str, jvm: Jvm, tuned: bool, into: str
) -> dict[str, Any]:
    """The job a Spark user writes instead: Kafka to a table (`into`: delta, iceberg or
    postgres), AvailableNow, with a checkpoint."""
    from drainer.settings import load_settings

    topics = ",".join(source.level_topic(level) for level in range(source.levels))
    if into == "postgres":
        create_pg_table(table)
    jvm.before()
    started = time.perf_counter()
    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", load_settings().bootstrap_servers)
        .option("subscribe", topics)
        .option("startingOffsets", "earliest")
        .options(**read_options(source, tuned))
        .load()
    )
    writer = (
        projection(records)
        .writeStream.option("checkpointLocation", delta_path(f"_checkpoints/{table}"))
        .trigger(availableNow=True)
    )
    if into == "iceberg":
        query = writer.format("iceberg").toTable(f"drainer.{iceberg_table(table)}")
    elif into == "postgres":
        query = writer.foreachBatch(copy_batch(table) if tuned else jdbc_append(table)).start()
    else:
        query = writer.format("delta").start(delta_path(table))
    query.awaitTermination()
    wall = time.perf_counter() - started
    memory = jvm.after()
    return {
        "wall_s": wall,
        "batches": len(query.recentProgress),
        "input_rows": sum(p.numInputRows for p in query.recentProgress),
        **memory,
    }


def iceberg_table(name: str) -> str:
    return f"bench.{name}"


def pg_url() -> str:
    from drainer.settings import load_settings, psycopg_url

    return psycopg_url(load_settings().database_url)


def create_pg_table(table: str) -> None:
    import psycopg

    with psycopg.connect(pg_url()) as conn:
        conn.execute(f'CREATE TABLE IF NOT EXISTS "{table}" ({PG_COLUMNS})')


def copy_rows(table: str) -> Any:
    """A `mapInArrow` function: each task COPYs its rows into `table` as Arrow's CSV (what
    drainer's Postgres sink does, so the peer has the same write path)."""
    url = pg_url()

    def copy(batches: Any) -> Any:
        import psycopg
        import pyarrow as pa
        from pyarrow import csv as pa_csv

        n = 0
        with psycopg.connect(url) as conn, conn.cursor() as cur:
            names = None
            with cur.copy(f'COPY "{table}" FROM STDIN (FORMAT csv)') as copy:
                for batch in batches:
                    if not batch.num_rows:
                        continue
                    names = names or batch.schema.names
                    out = pa.BufferOutputStream()
                    pa_csv.write_csv(
                        batch, out, write_options=pa_csv.WriteOptions(include_header=False)
                    )
                    copy.write(memoryview(out.getvalue()))
                    n += batch.num_rows
        yield pa.RecordBatch.from_pydict({"rows": [n]})

    return copy


def copy_batch(table: str) -> Any:
    """foreachBatch's function: COPY the micro-batch into Postgres from its tasks."""
    copy = copy_rows(table)

    def write(batch: Any, batch_id: int) -> None:
        batch.mapInArrow(copy, "rows long").collect()

    return write


def jdbc_append(table: str) -> Any:
    """foreachBatch's function: append the micro-batch to a Postgres table through JDBC."""
    from sqlalchemy import make_url

    from drainer.settings import load_settings

    url = make_url(load_settings().database_url)
    jdbc = (
        f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/"
        f"{url.database or 'postgres'}?reWriteBatchedInserts=true"
    )
    properties = {"driver": "org.postgresql.Driver", "user": url.username or "postgres"}
    if url.password:
        properties["password"] = url.password

    def append(batch: Any, batch_id: int) -> None:
        batch.write.jdbc(jdbc, table, mode="append", properties=properties)

    return append


def limit_from_memory(spark: Any, source: Any, into: str, table: str, count: int) -> dict:
    """Spark writing the rows, cached in memory first, into a fresh table of kind `into`."""
    rows = projection(fair.bounded_read(spark, source, read_options(source, tuned=True)))
    rows = rows.cache()
    try:
        assert rows.count() == count  # materialized before the clock starts
        if into == "postgres":
            create_pg_table(table)
        started = time.perf_counter()
        if into == "postgres":
            rows.mapInArrow(copy_rows(table), "rows long").collect()
        elif into == "iceberg":
            rows.writeTo(f"drainer.{iceberg_table(table)}").using("iceberg").create()
        else:
            rows.write.format("delta").save(delta_path(table))
        wall = time.perf_counter() - started
    finally:
        rows.unpersist()
    return {"wall_s": wall}


def clean_up(
    spark: Any, sources: list[Any], tables: list[tuple[str, str]], drains: list[str]
) -> None:
    """Topics, tables and drain files of this size: 10M records are GBs on a shared broker."""
    from sqlalchemy import text

    from drainer.settings import load_settings
    from tests.support.drains import delete_topics
    from tests.support.stack import get_engine

    for source in sources:
        delete_topics(source)
    for what, where in tables:
        if what == "postgres":
            with get_engine().begin() as conn:
                conn.execute(text(f'DROP TABLE IF EXISTS "{where}" CASCADE'))
        elif what == "iceberg":
            spark.sql(f"DROP TABLE IF EXISTS drainer.{where} PURGE")  # leaves empty folders
            folder = Path(load_settings().warehouse, *where.split("."))
            if folder.is_dir():
                shutil.rmtree(folder)
        elif Path(where).is_dir():  # Delta (and the baseline's checkpoint) on a local path
            shutil.rmtree(where)
    for name in drains:  # fresh_drain's drains files
        (OUT / f"{name}.yaml").unlink(missing_ok=True)
    warehouse = Path(load_settings().warehouse)
    for folder in (f"{FOLDER}/_checkpoints", FOLDER, "bench"):  # if no other run uses them
        with contextlib.suppress(OSError):
            (warehouse / folder).rmdir()


def plan(sinks: list[str]) -> list[tuple[str, str, str]]:
    """Every path of a sitting: (name, kind, sink it writes or "" for a shared limit)."""
    paths = [(fair.LIMIT_NOOP, fair.LIMIT, ""), ("limit_consumer", fair.LIMIT, "")]
    for sink in sinks:
        paths += [
            (sink, fair.DRAINER, sink),
            (f"streaming_{sink}_tuned", fair.TUNED, sink),
            (f"streaming_{sink}", fair.DEFAULT, sink),
            (f"limit_{sink}_from_memory", fair.LIMIT, sink),
        ]
    return paths


def contender(name: str, kind: str, sink: str, source: Any) -> fair.Contender:
    reads = read_options(source, tuned=True)
    if name == fair.LIMIT_NOOP:
        return fair.noop_contender(source)
    if name == "limit_consumer":
        what = "a bare confluent-kafka consumer taking the records"
        return fair.Contender(name, kind, what, fair.drainer_consumer_settings())
    if kind == fair.DRAINER:
        return fair.Contender(name, kind, f"drainer run, sink {sink}", reads)
    if kind == fair.LIMIT:
        how = "COPY from the tasks" if sink == "postgres" else f"Spark's {sink} writer"
        what = f"Spark writing the rows, read with drainer's options and cached ({how})"
        return fair.Contender(name, kind, what, reads)
    tuned = kind == fair.TUNED
    how = {"postgres": "COPY from the tasks" if tuned else "JDBC, reWriteBatchedInserts"}
    what = f"AvailableNow job into {sink}" + (f" ({how[sink]})" if sink in how else "")
    return fair.Contender(name, kind, what, reads if tuned else {})


def one_size(records: int, sinks: list[str], repeat: int, warmup: int, keep: bool) -> dict:
    from kafka_sink import limit_consumer

    from spark_jobs import drain_job
    from spark_jobs.session import get_spark

    # produce finds the drain in the drains file fresh_drain made current: one after the other
    warm = fresh_drain(warmup, processor=PROCESSOR)
    produce(warm, warmup)
    source = fresh_drain(records, processor=PROCESSOR)  # its topics; never run itself
    started = time.monotonic()
    produce(source, records)
    produce_s = time.monotonic() - started
    expected = {id(warm): fair.Expected.of_drain(warm), id(source): fair.Expected.of_drain(source)}

    spark = get_spark(load_settings())
    jvm = Jvm(jvm_pid())
    tables: list[tuple[str, str]] = []
    drains = [warm.name, source.name]

    def timed(name: str, kind: str, sink: str, topics: Any, count: int, memory: Jvm) -> dict:
        """One run of a path; its table read back (exit 1 when it disagrees)."""
        if name == fair.LIMIT_NOOP:
            return fair.limit_noop(spark, topics, count)
        if name == "limit_consumer":
            return limit_consumer(topics, count)
        table = f"bench_{uuid.uuid4().hex[:8]}"
        if kind == fair.DRAINER:
            drain = drain_for(sink, topics, count)
            drains.append(drain.name)
            where = table_of(sink, drain)
            got = run_drainer(drain, count, memory)
        else:
            where = {"delta": delta_path(table), "iceberg": iceberg_table(table)}.get(sink, table)
            if kind == fair.LIMIT:
                got = limit_from_memory(spark, topics, sink, table, count)
            else:
                tables.append(("delta", delta_path(f"_checkpoints/{table}")))
                got = run_streaming(spark, topics, table, memory, kind == fair.TUNED, sink)
        tables.append((sink, where))
        expected[id(topics)].check(name, readback.table(sink, where))
        return {"table": where, **got}

    paths = plan(sinks)
    # warm every path on this session: first writes load classes, the JIT compiles
    for name, kind, sink in paths:
        timed(name, kind, sink, warm, warmup, Jvm(None))
    jvm_rss_at_start = jvm.rss_mb()
    runs: list[dict[str, Any]] = []
    for round_ in range(repeat):
        # each round starts one path later, so no path always runs first or last
        for name, kind, sink in paths[round_ % len(paths) :] + paths[: round_ % len(paths)]:
            memory = jvm if kind != fair.LIMIT else Jvm(None)
            got = timed(name, kind, sink, source, records, memory)
            runs.append({"path": name, "kind": kind, "sink": sink, "round": round_, **got})
            checked = ", read back" if "table" in got else ""
            print(f"{records:,} {name}: {got['wall_s']:.2f} s{checked}", file=sys.stderr)
    python_peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if "delta" in sinks:  # the same rows: the same columns and types in both Delta tables
        ours = delta_columns(next(r["table"] for r in runs if r["path"] == "delta"))
        theirs = delta_columns(next(r["table"] for r in runs if r["path"] == "streaming_delta"))
        assert ours == theirs, f"drainer's Delta columns {ours} != the baseline's {theirs}"
    if not keep:
        clean_up(spark, [warm, source], tables, drains)
    return {
        "records": records,
        "produce_s": round(produce_s, 2),
        "spark": drain_job.which_spark(load_settings()),
        "python_client_peak_rss_mb": python_peak,
        "jvm_rss_at_start_mb": jvm_rss_at_start,
        "paths": [
            {"contender": vars(contender(name, kind, sink, source)), "sink": sink}
            for name, kind, sink in paths
        ],
        "runs": runs,
    }


def delta_columns(where: str) -> list[tuple[str, str]]:
    from deltalake import DeltaTable

    return [(f.name, str(f.type)) for f in DeltaTable(where).to_pyarrow_dataset().schema]


def summarize(size: dict[str, Any]) -> list[dict[str, Any]]:
    """Per sink: its paths and the shared limits, printed with their settings and drainer's
    ratios; the rows, each with its sink, for the results file."""
    records = size["records"]
    contenders = {p["contender"]["name"]: p for p in size["paths"]}
    sinks = [p["sink"] for p in size["paths"] if p["contender"]["kind"] == fair.DRAINER]
    out = []
    for sink in sinks:
        names = [n for n, p in contenders.items() if p["sink"] in (sink, "")]
        walls = {n: [r["wall_s"] for r in size["runs"] if r["path"] == n] for n in names}
        paths = [fair.Contender(**contenders[n]["contender"]) for n in names]
        rows = fair.report(f"sink {sink}", records, paths, walls)
        for row in rows:
            mine = [r for r in size["runs"] if r["path"] == row["path"]]
            row["sink"] = sink
            if row["kind"] == fair.DRAINER:
                row["spark_job_s"] = fair.median([r["phases"]["spark_job"] for r in mine])
                row["phases"] = {
                    k: fair.median([r["phases"].get(k, 0.0) for r in mine])
                    for k in mine[0]["phases"]
                }
            peaks = [r.get("jvm_peak_rss_mb") for r in mine if r.get("jvm_peak_rss_mb")]
            row["jvm_peak_rss_mb"] = max(peaks, default=None)
        out += rows
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--sinks", nargs="+", choices=SINKS, default=list(SINKS))
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds per size (median)")
    parser.add_argument("--warmup", type=int, default=3000, help="records of the warm-up runs")
    parser.add_argument("--keep", action="store_true", help="keep topics and tables")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    if args.one:
        report = one_size(args.one, args.sinks, args.repeat, args.warmup, args.keep)
        print(json.dumps(report, default=str))
        return 0

    from drainer import services
    from drainer.settings import load_settings

    if load_settings().spark_endpoint is None:
        # an in-process session loads only the formats of the drains file current when it
        # starts; this benchmark's drains files change under it
        print("lakehouse_sinks runs on Spark Connect: unset SPARK_MASTER", file=sys.stderr)
        return 2
    # the baselines write Delta checkpoints; a running server without a format's jars restarts
    formats = ("delta", "iceberg") if "iceberg" in args.sinks else ("delta",)
    services.up(load_settings(), echo=lambda *_: None, formats=formats)
    for records in args.records:
        cmd = [sys.executable, __file__, "--one", str(records), "--sinks", *args.sinks]
        cmd += ["--repeat", str(args.repeat), "--warmup", str(args.warmup)]
        cmd += ["--keep"] if args.keep else []
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # progress on stderr
        if done.returncode != 0:
            return done.returncode
        size = json.loads(done.stdout.strip().splitlines()[-1])
        rows = summarize(size)
        fair.write_results(
            "lakehouse_sinks",
            {"records": records, "repeat": args.repeat, "rows": rows, "size": size},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
