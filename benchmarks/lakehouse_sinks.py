"""drainer's sinks against the Structured Streaming job a Spark user writes instead (issue 17).

  .venv/bin/python benchmarks/lakehouse_sinks.py      # --records 100000 1000000 --repeat 3

Per size, N records (100-byte values over 1,000 keys, 3 levels x 4 partitions) are produced
once. Each sink (`--sinks postgres delta iceberg`) is drained from those topics by a drain of its
own (its own name, consumer group and table; budget = the backlog, so one run drains it all),
dataframe mode with `spark_jobs.examples:one_row_per_record`; timed: `spark_jobs.drain_job.run`
whole (plan, Spark read + write, table commit, Postgres commit, Kafka mirror).

The baseline, `streaming`, is the hand-written job: `readStream` of the 3 level topics
(`subscribe`, `startingOffsets=earliest`), the same projection, `writeStream` into a fresh Delta
table with a checkpoint and `trigger(availableNow=True)`, timed from building the query to
`awaitTermination()` returning, on the same session of the same Connect server.
`streaming_fetch10` is the same job with the one Kafka option drainer sets on its bounded reads
(`kafka.fetch.max.wait.ms=10`). Issue 30 asks each sink against the AvailableNow job writing the
same rows into the same kind of table, so for Iceberg and Postgres the job also runs as
`streaming_iceberg` (`writeStream.format("iceberg").toTable(...)` in drainer's catalog) and
`streaming_postgres` (`foreachBatch` appending each micro-batch through Spark's JDBC writer,
`reWriteBatchedInserts=true`, the documented way to write a stream into Postgres; the JDBC driver
is the one the Iceberg catalog already loads on the server); each is timed when its sink is.
Every path is warmed by a small run of its own (`--warmup`
records) before anything is timed; `--repeat` rounds (each starting one path later) give medians.

Each size runs in a child process, so the Python client's peak RSS is that size's. The Spark
JVM (the Connect server's; local mode: driver and executors in one JVM) is shared by all sizes,
so it is measured around each timed run: before it a full GC (the heap it already held) and a
reset of the peak RSS (`/proc/<pid>/clear_refs`); after it the peak RSS and the heap after a
full GC (`jcmd`). Every table is read back without Spark (a Postgres count, `deltalake`,
`pyiceberg`) and must hold N rows; the drainer's and the baseline's Delta tables must have the
same columns. Topics, tables and drains files are removed afterwards unless `--keep`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import OUT, fresh_drain, produce, vm_hwm_kb

from drainer.settings import load_settings

SINKS = ("postgres", "delta", "iceberg")
# the hand-written job as a Spark user writes it, and with the Kafka option drainer's bounded
# reads set (a consumer that reached its range's end waits 10 ms for more, not Spark's 500 ms)
BASELINES = {"streaming": {}, "streaming_fetch10": {"kafka.fetch.max.wait.ms": "10"}}
BASELINE = "streaming"
# the same job into the same kind of table as a sink (Delta's is `streaming` itself)
SAME_SINK = {"postgres": "streaming_postgres", "delta": "streaming", "iceberg": "streaming_iceberg"}
STREAMING = (*BASELINES, "streaming_iceberg", "streaming_postgres")
PROCESSOR = "spark_jobs.examples:one_row_per_record"
FOLDER = "bench_lakehouse"  # under the warehouse: the Delta tables and the baseline's checkpoints


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
    from drainer.config.sinks import DeltaSinkConfig
    from drainer.settings import load_settings
    from drainer.sinks import sink_for

    return sink_for(DeltaSinkConfig(path=f"{FOLDER}/{name}"), load_settings()).location()


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


def run_streaming(
    spark: Any, source: Any, table: str, jvm: Jvm, options: dict[str, str], into: str = "delta"
) -> dict[str, Any]:
    """The job a Spark user writes instead: Kafka to a table (`into`: delta, iceberg or
    postgres), AvailableNow, with a checkpoint."""
    from pyspark.sql import functions as F

    from drainer.settings import load_settings

    topics = ",".join(source.level_topic(level) for level in range(source.levels))
    jvm.before()
    started = time.perf_counter()
    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", load_settings().bootstrap_servers)
        .option("subscribe", topics)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
    )
    rows = records.select(  # what one_row_per_record makes of the drainer's read
        "topic",
        "partition",
        "offset",
        F.element_at(F.split("topic", "-"), -1).cast("int").alias("level"),
        F.col("key").cast("string").alias("key"),
        F.length("value").alias("value_size"),
    )
    writer = rows.writeStream.option(
        "checkpointLocation", delta_path(f"_checkpoints/{table}")
    ).trigger(availableNow=True)
    if into == "iceberg":
        query = writer.format("iceberg").toTable(f"drainer.{iceberg_table(table)}")
    elif into == "postgres":
        query = writer.foreachBatch(jdbc_append(table)).start()
    else:
        query = writer.format("delta").start(delta_path(table))
    query.awaitTermination()
    wall = time.perf_counter() - started
    memory = jvm.after()
    return {
        "wall_s": round(wall, 2),
        "batches": len(query.recentProgress),
        "input_rows": sum(p.numInputRows for p in query.recentProgress),
        **memory,
    }


def iceberg_table(name: str) -> str:
    return f"bench.{name}"


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


def rows_in(what: str, where: str) -> int:
    """Rows of a sink table, read without Spark."""
    from drainer.settings import load_settings

    if what == "postgres":
        from sqlalchemy import text

        from tests.support.stack import get_engine

        with get_engine().connect() as conn:
            return int(conn.execute(text(f'SELECT count(*) FROM "{where}"')).scalar_one())
    if what == "iceberg":
        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("drainer", uri=load_settings().database_url)
        return int(catalog.load_table(where).scan().count())
    from deltalake import DeltaTable

    return int(DeltaTable(where).to_pyarrow_dataset().count_rows())


def delta_columns(where: str) -> list[tuple[str, str]]:
    from deltalake import DeltaTable

    return [(f.name, str(f.type)) for f in DeltaTable(where).to_pyarrow_dataset().schema]


def table_of(what: str, drain: Any) -> str:
    """Where `rows_in` and `clean_up` find a drain's table."""
    return delta_path(drain.name) if what == "delta" else str(drain.sink.table)


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


def one_size(records: int, sinks: list[str], repeat: int, warmup: int, keep: bool) -> dict:
    from spark_jobs import drain_job
    from spark_jobs.session import get_spark

    load_before = Path("/proc/loadavg").read_text().split()[:3]
    # produce finds the drain in the drains file fresh_drain made current: one after the other
    warm = fresh_drain(warmup, processor=PROCESSOR)
    produce(warm, warmup)
    source = fresh_drain(records, processor=PROCESSOR)  # its topics; never run itself
    started = time.monotonic()
    produce(source, records)
    produce_s = time.monotonic() - started

    spark = get_spark(load_settings())
    jvm = Jvm(jvm_pid())
    tables: list[tuple[str, str]] = []
    drains = [warm.name, source.name]

    def timed(what: str, topics: Any, count: int, memory: Jvm) -> dict[str, Any]:
        if what in STREAMING:
            name = f"bench_str_{uuid.uuid4().hex[:8]}"
            into = streaming_into(what)
            where = {"delta": delta_path(name), "iceberg": iceberg_table(name)}.get(into, name)
            tables.extend([(into, where), ("delta", delta_path(f"_checkpoints/{name}"))])
            options = BASELINES.get(what, {})
            return {"table": where} | run_streaming(spark, topics, name, memory, options, into)
        drain = drain_for(what, topics, count)
        drains.append(drain.name)
        tables.append((what, table_of(what, drain)))
        return {"table": table_of(what, drain)} | run_drainer(drain, count, memory)

    paths = [*sinks, *BASELINES, *(SAME_SINK[s] for s in sinks if SAME_SINK[s] not in BASELINES)]
    # warm every path on this session: first writes load classes, the JIT compiles
    for what in paths:
        timed(what, warm, warmup, Jvm(None))
    jvm_rss_at_start = jvm.rss_mb()
    runs: list[dict[str, Any]] = []
    for round_ in range(repeat):
        # each round starts one path later, so no path always runs first or last
        for what in paths[round_ % len(paths) :] + paths[: round_ % len(paths)]:
            runs.append({"what": what, "round": round_} | timed(what, source, records, jvm))
            print(f"{records:,} {what}: {runs[-1]['wall_s']} s", file=sys.stderr)
    # before the read-back: deltalake and pyiceberg are no part of a run
    python_peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    load_after = Path("/proc/loadavg").read_text().split()[:3]

    for run in runs:
        kind = streaming_into(run["what"]) if run["what"] in STREAMING else run["what"]
        run["rows"] = rows_in(kind, run["table"])
        assert run["rows"] == records, f"{run['what']}: {run['rows']} rows, {records} records"
    if "delta" in sinks:  # the same rows: the same columns and types in both Delta tables
        ours = delta_columns(next(r["table"] for r in runs if r["what"] == "delta"))
        theirs = delta_columns(next(r["table"] for r in runs if r["what"] == BASELINE))
        assert ours == theirs, f"drainer's Delta columns {ours} != the baseline's {theirs}"
    if not keep:
        clean_up(spark, [warm, source], tables, drains)
    return {
        "records": records,
        "produce_s": round(produce_s, 2),
        "spark": drain_job.which_spark(load_settings()),
        "python_client_peak_rss_mb": python_peak,
        "jvm_rss_at_start_mb": jvm_rss_at_start,
        "load_before": load_before,
        "load_after": load_after,
        "runs": runs,
    }


def streaming_into(what: str) -> str:
    """The table a streaming baseline writes: `streaming_iceberg` Iceberg, and so on."""
    return (
        what.removeprefix("streaming_")
        if what in ("streaming_iceberg", "streaming_postgres")
        else "delta"
    )


def summarize(size: dict) -> list[dict[str, Any]]:
    """Per path: median wall time over the rounds, and its ratio to each baseline's median."""
    records = size["records"]
    order = [w for w in (*SINKS, *STREAMING) if any(r["what"] == w for r in size["runs"])]
    median = {
        what: statistics.median(r["wall_s"] for r in size["runs"] if r["what"] == what)
        for what in order
    }
    rows = []
    for what in order:
        mine = [r for r in size["runs"] if r["what"] == what]
        jvm_peak = [r["jvm_peak_rss_mb"] for r in mine if r["jvm_peak_rss_mb"] is not None]
        # the round that left the most heap behind, with what the server held before it
        heap = max(mine, key=lambda r: r["jvm_heap_after_gc_mb"] or 0)
        rows.append(
            {
                "records": records,
                "what": what,
                "rounds": len(mine),
                "wall_s": round(median[what], 2),
                "records_per_s": round(records / median[what]),
                **{f"vs_{b}": round(median[what] / median[b], 2) for b in BASELINES},
                # against the AvailableNow job into the same kind of table (issue 30's measure)
                "same_sink": SAME_SINK.get(what),
                "vs_same_sink": round(median[what] / median[SAME_SINK[what]], 2)
                if what in SAME_SINK and SAME_SINK[what] in median
                else None,
                "rows": mine[0]["rows"],
                "spark_job_s": statistics.median(r["phases"]["spark_job"] for r in mine)
                if what not in STREAMING
                else None,
                "python_client_peak_rss_mb": size["python_client_peak_rss_mb"],
                "jvm_peak_rss_mb": max(jvm_peak, default=None),
                "jvm_heap_before_mb": heap["jvm_heap_before_mb"],
                "jvm_heap_after_gc_mb": heap["jvm_heap_after_gc_mb"],
            }
        )
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="drainer sinks vs Structured Streaming (AvailableNow)")
    columns = [
        ("records", "records", "{:,}"),
        ("what", "path", "{}"),
        ("wall_s", "wall (s)", "{:.2f}"),
        ("records_per_s", "records/s", "{:,}"),
        ("vs_streaming", "x streaming", "{:.2f}"),
        ("vs_streaming_fetch10", "x fetch10", "{:.2f}"),
        ("vs_same_sink", "x streaming, same sink", "{:.2f}"),
        ("rows", "rows read back", "{:,}"),
        ("spark_job_s", "Spark job (s)", "{:.2f}"),
        ("python_client_peak_rss_mb", "Python client peak RSS (MB)", "{}"),
        ("jvm_peak_rss_mb", "JVM peak RSS (MB)", "{}"),
        ("jvm_heap_before_mb", "JVM heap before (MB)", "{}"),
        ("jvm_heap_after_gc_mb", "JVM heap after GC (MB)", "{}"),
    ]
    for _, title, _ in columns:
        table.add_column(title, justify="left" if title == "path" else "right")
    for row in rows:
        table.add_row(
            *("–" if row[key] is None else fmt.format(row[key]) for key, _, fmt in columns)
        )
    console = Console()
    Console(width=max(console.width, 200)).print(table)  # piped: rich's 80 columns are too few


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--sinks", nargs="+", choices=SINKS, default=list(SINKS))
    parser.add_argument("--repeat", type=int, default=1, help="timed rounds per size (median)")
    parser.add_argument("--warmup", type=int, default=3000, help="records of the warm-up runs")
    parser.add_argument("--keep", action="store_true", help="keep topics and tables")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    if args.one:
        report = one_size(args.one, args.sinks, args.repeat, args.warmup, args.keep)
        print(json.dumps(report))
        return 0

    from drainer import services
    from drainer.settings import load_settings

    if load_settings().spark_endpoint is None:
        # an in-process session loads only the formats of the drains file current when it
        # starts; this benchmark's drains files change under it
        print("lakehouse_sinks runs on Spark Connect: unset SPARK_MASTER", file=sys.stderr)
        return 2
    # the baseline writes Delta; a running server without a format's jars is restarted
    formats = ("delta", "iceberg") if "iceberg" in args.sinks else ("delta",)
    services.up(load_settings(), echo=lambda *_: None, formats=formats)
    sizes = []
    for records in args.records:
        cmd = [sys.executable, __file__, "--one", str(records), "--sinks", *args.sinks]
        cmd += ["--repeat", str(args.repeat), "--warmup", str(args.warmup)]
        cmd += ["--keep"] if args.keep else []
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # progress on stderr
        if done.returncode != 0:
            return done.returncode
        sizes.append(json.loads(done.stdout.strip().splitlines()[-1]))
    rows = [row for size in sizes for row in summarize(size)]
    print_table(rows)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "args": vars(args),
        "summary": rows,
        "sizes": sizes,
    }
    path = OUT / "lakehouse_sinks.json"
    path.write_text(json.dumps(report, indent=2))
    for size in sizes:
        print(
            f"{size['records']:,} records: load average {' '.join(size['load_before'])} before, "
            f"{' '.join(size['load_after'])} after; {size['spark']}"
        )
    print(f"raw results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
