"""A fair fight, shared by every benchmark (issue 51).

- The settings drainer runs with, handed to every peer that has the same knob: Spark's Kafka
  source options (`fetch.max.wait.ms`, `max.poll.records`, `minPartitions`, from
  `spark_jobs.kafka_source`), the Kafka sink's producer settings (compression, linger, batch
  size), librdkafka's twin of the fetch wait for confluent-kafka consumers. The default-
  configured peer stays as a second line (`TUNED` / `DEFAULT`).
- `Contender`: one path of a benchmark with the settings it ran with, printed beside its result
  (`report`), so a table never hides which knobs a contender had.
- `Expected` and the readers in `readback.py`: every path's output is read back by a reader
  that is not the path's own, counting distinct source coordinates; `Expected.check` exits
  non-zero when a read-back disagrees.
- `write_results`: the JSON under `benchmarks/results/` that `charts.py` draws, with the date,
  the machine and the commit.
- `limit_noop`: the limit every Spark path shares, Spark reading a drain's ranges (`bounded_read`:
  `assign` + numeric offsets, drainer's read options) into `noop`, the values decoded where
  every path of the benchmark decodes them (`value_schema`).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from drainer.settings import load_settings

RESULTS = Path(__file__).resolve().parent / "results"
Offsets = dict[str, dict[str, int]]  # topic -> partition (as a string, Spark's JSON) -> offset
TUNED, DEFAULT, LIMIT, DRAINER = "tuned", "default", "limit", "drainer"


def drainer_read_options(ranges: int, cores: int | None) -> dict[str, str]:
    """The Kafka source options drainer's bounded reads set, as a Spark reader takes them:
    the two consumer settings, and `minPartitions` where drainer sets it (a plan of fewer
    ranges than the job's cores: `spark_jobs.kafka_source.read_ranges`)."""
    from spark_jobs.kafka_source import BOUNDED_FETCH_MAX_WAIT_MS, BOUNDED_MAX_POLL_RECORDS

    options = {
        "kafka.fetch.max.wait.ms": str(BOUNDED_FETCH_MAX_WAIT_MS),
        "kafka.max.poll.records": str(BOUNDED_MAX_POLL_RECORDS),
    }
    if cores is not None and cores > ranges:
        options["minPartitions"] = str(cores)
    return options


def drainer_consumer_settings() -> dict[str, Any]:
    """drainer's read settings as librdkafka (confluent-kafka) takes them: `fetch.wait.max.ms`
    is its name for `fetch.max.wait.ms`; it has no `max.poll.records` (a `consume(n)` call
    asks for n records: the peers ask for 10,000, drainer's poll size)."""
    from spark_jobs.kafka_source import BOUNDED_FETCH_MAX_WAIT_MS

    return {"fetch.wait.max.ms": BOUNDED_FETCH_MAX_WAIT_MS}


def drainer_producer_settings() -> dict[str, Any]:
    """The Kafka sink's producer settings (librdkafka names: the driver producer's)."""
    from drainer.sinks.kafka.transactions import OUTPUT_PRODUCER_DEFAULTS

    return dict(OUTPUT_PRODUCER_DEFAULTS)


def drainer_java_producer_settings() -> dict[str, str]:
    """The same, as the JVM's KafkaProducer takes them (the server producer's; Spark's sink)."""
    from spark_jobs.sinks.kafka.server import server_defaults

    return server_defaults()


def spark_cores() -> int | None:
    from spark_jobs.session import cores, get_spark

    return cores(get_spark(load_settings()))


def drain_read_options(drain: Any) -> dict[str, str]:
    """`drainer_read_options` for a drain's ranges: one per level and partition, read by the
    cores of the Connect server's session."""
    return drainer_read_options(drain.levels * drain.partitions, spark_cores())


def kafka_ranges(drain: Any) -> tuple[dict[str, list[int]], Offsets, Offsets]:
    """The drain's ranges now (its level topics' watermarks: what a run whose budget covers
    the backlog reads) as Spark's Kafka source takes them (`Expected.spark_offsets`)."""
    return Expected.of_drain(drain).spark_offsets()


def bounded_read(
    spark: Any, drain: Any, options: dict[str, str], end: Offsets | None = None
) -> Any:
    """The drain's whole backlog as Spark reads it (`assign` + numeric offsets and headers, as
    drainer reads), with `options` (drainer's read options, or none: Spark's defaults); `end`:
    other ending offsets than the watermarks."""
    assign, start, ends = kafka_ranges(drain)
    end = ends if end is None else end
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", load_settings().bootstrap_servers)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(start))
        .option("endingOffsets", json.dumps(end))
        .option("includeHeaders", "true")
        .options(**options)
        .load()
    )


def decoded(read: Any, value_schema: str) -> Any:
    """Kafka source rows as typed rows: the JSON value decoded with `value_schema`
    (`from_json`, as the peers decode it), beside the source coordinates."""
    from pyspark.sql import functions as F

    value = F.from_json(F.col("value").cast("string"), value_schema).alias("v")
    return read.select(value, "topic", "partition", "offset").select(
        "v.*", "topic", "partition", "offset"
    )


LIMIT_NOOP = "limit_spark_noop"


def limit_noop(
    spark: Any, drain: Any, records: int, value_schema: str | None = None
) -> dict[str, float]:
    """The limit of every Spark path: the drain's ranges read with drainer's read options into
    `noop`, the values decoded with `value_schema` where the benchmark's paths all decode
    them. The rows are counted after the clock stops, by a read of their own: a limit that
    read fewer records than the backlog would be a false floor, so it fails the benchmark,
    and a count inside the timed read (an observed metric, up to 0.3 s per 1M rows measured
    here) would raise the floor it measures."""
    read = bounded_read(spark, drain, drain_read_options(drain))
    rows = decoded(read, value_schema) if value_schema else read
    started = time.perf_counter()
    rows.write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - started
    counted = rows.count()
    if counted != records:
        sys.exit(f"{LIMIT_NOOP}: read {counted} rows, expected {records}")
    return {"wall_s": wall}


def noop_contender(drain: Any, value_schema: str | None = None) -> Contender:
    """`limit_noop`'s line in a report, with the read options it ran with."""
    what = "Spark reading the ranges into noop"
    settings: dict[str, Any] = dict(drain_read_options(drain))
    if value_schema:
        # decoding is part of what every path of such a benchmark does, so the limit does it
        what += ", values decoded (from_json, the benchmark's schema: every path decodes)"
        settings["from_json"] = value_schema
    return Contender(LIMIT_NOOP, LIMIT, what, settings)


@dataclass
class Contender:
    """One contender: its name, its kind (drainer, a tuned or default peer, a limit), what it
    does, and every setting it ran with."""

    name: str
    kind: str
    what: str
    settings: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        knobs = ", ".join(f"{k}={v}" for k, v in sorted(self.settings.items())) or "defaults"
        return f"{self.name} [{self.kind}] {self.what}; settings: {knobs}"


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def median_interval(values: list[float], confidence: float = 0.9) -> tuple[float, float, float]:
    """The k-th smallest and k-th largest of `values`, k as large as keeps the median inside
    them with at least `confidence`, whatever the noise's distribution (the sign test's
    interval: each value falls below the median with probability 1/2), and that confidence.
    Five values give the smallest and the largest, at 94%."""
    n = len(values)
    ordered = sorted(values)

    def covered(k: int) -> float:  # P(k-th smallest <= median <= k-th largest)
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k + 1 <= n // 2 and covered(k + 1) >= confidence:
        k += 1
    return ordered[k - 1], ordered[n - k], covered(k)


def noise_verdict(paired: list[float]) -> str:
    """Whether after differs from before beyond the rounds' noise: when the interval that holds
    the paired ratios' median (`median_interval`) lies wholly above 1, or wholly below. The
    medians' ratio alone does not say so: each side's median may come from another round."""
    low, high, confidence = median_interval(paired) if paired else (0.0, 0.0, 0.0)
    if confidence < 0.9:
        return f"too few counted rounds ({len(paired)}) to tell: 5 or more give a 90% interval"
    span = f"paired median {median(paired):.2f}x, {confidence:.0%} interval {low:.2f}-{high:.2f}"
    if low > 1:
        return f"slower beyond noise ({span})"
    if high < 1:
        return f"faster beyond noise ({span})"
    return f"within noise ({span})"


def report(
    title: str, records: int, paths: list[Contender], walls: dict[str, list[float]]
) -> list[dict[str, Any]]:
    """Per path: its median wall time, records/s, and drainer's ratio to it; printed as a
    table with each path's settings under it. Returns the rows for the results file."""
    medians = {name: median(ws) for name, ws in walls.items() if ws}
    ours = [p.name for p in paths if p.kind == DRAINER and p.name in medians]
    mine = medians[ours[0]] if ours else None
    rows = []
    for path in paths:
        if path.name not in medians:
            continue
        wall = medians[path.name]
        rows.append(
            {
                "path": path.name,
                "kind": path.kind,
                "what": path.what,
                "settings": path.settings,
                "records": records,
                "wall_s": wall,
                "runs_s": [round(w, 3) for w in walls[path.name]],
                "records_per_s": round(records / wall) if wall else None,
                # drainer's time over this path's: below 1.0 drainer is faster
                "drainer_over_this": round(mine / wall, 2) if mine and wall else None,
                # the same, round by round (`paired`): its median and the interval holding it
                "drainer_over_this_paired": paired(walls, ours[0], path.name) if ours else None,
            }
        )
    print(f"\n{title}: {records:,} records, medians of {max(map(len, walls.values()))}")
    print("| path | kind | wall (s) | records/s | drainer / this |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        ratio = "" if row["drainer_over_this"] is None else f"{row['drainer_over_this']:.2f}x"
        print(
            f"| {row['path']} | {row['kind']} | {row['wall_s']:.2f} | "
            f"{row['records_per_s']:,} | {ratio} |"
        )
    print("settings:")
    for path in paths:
        print(f"  {path.line()}")
    for name in ours:
        print(verdict(name, rows))
        for row in rows:
            found = paired(walls, name, row["path"])
            if row["kind"] not in (LIMIT, DRAINER) and found:
                print(f"{name} / {row['path']}, round by round: {found['verdict']}")
    return rows


def paired(walls: dict[str, list[float]], drainer: str, other: str) -> dict[str, Any] | None:
    """drainer's time over `other`'s within each round (the benchmarks run every path once a
    round, back to back, so a load that drifts between rounds falls on both): the median of
    those ratios, the interval that holds it (`median_interval`) and `noise_verdict`'s
    reading. None for drainer itself or when the two ran a different number of rounds."""
    mine, theirs = walls.get(drainer, []), walls.get(other, [])
    if other == drainer or not mine or len(mine) != len(theirs) or not all(theirs):
        return None
    ratios = [a / b for a, b in zip(mine, theirs, strict=True)]
    low, high, confidence = median_interval(ratios)
    return {
        "median": round(median(ratios), 3),
        "low": round(low, 3),
        "high": round(high, 3),
        "confidence": round(confidence, 3),
        "verdict": noise_verdict(ratios),
    }


def verdict(drainer: str, rows: list[dict[str, Any]]) -> str:
    """One line: drainer's ratio to the limit next to its ratio to the peers."""
    ours = next(r for r in rows if r["path"] == drainer)
    parts = [
        f"{r['path']} ({r['kind']}) {ours['wall_s'] / r['wall_s']:.2f}x"
        for r in rows
        if r["path"] != drainer and r["kind"] != DRAINER and r["wall_s"]
    ]
    return f"{drainer}'s wall time over each path's: " + "; ".join(parts)


@dataclass(frozen=True)
class Expected:
    """The source records of a benchmark: per (topic, partition), [low, high)."""

    ranges: dict[tuple[str, int], tuple[int, int]]

    @property
    def records(self) -> int:
        return sum(high - low for low, high in self.ranges.values())

    def spark_offsets(self) -> tuple[dict[str, list[int]], Offsets, Offsets]:
        """The ranges as Spark's Kafka source options take them: `assign` (topic ->
        partitions), `startingOffsets` and `endingOffsets` (topic -> partition -> offset)."""
        assign: dict[str, list[int]] = {}
        start: Offsets = {}
        end: Offsets = {}
        for (topic, partition), (low, high) in sorted(self.ranges.items()):
            assign.setdefault(topic, []).append(partition)
            start.setdefault(topic, {})[str(partition)] = low
            end.setdefault(topic, {})[str(partition)] = high
        return assign, start, end

    @classmethod
    def of_drain(cls, drain: Any) -> Expected:
        from drainer.kafka.session import KafkaSession

        with KafkaSession(drain, load_settings()) as kafka:
            marks = kafka.watermarks(kafka.partitions(range(drain.levels)))
        return cls({(drain.level_topic(lv), p): (w.low, w.high) for (lv, p), w in marks.items()})

    def check(self, path: str, found: dict[tuple[str, int], tuple[int, int, int, int]]) -> int:
        """`found`: per source partition (rows, distinct offsets, lowest, highest) as a reader
        saw them. Exits 1 unless they are exactly this benchmark's records, each once."""
        wrong = []
        for key, (low, high) in self.ranges.items():
            rows, distinct, first, last = found.get(key, (0, 0, None, None))
            if high == low and rows == 0:
                continue
            if (rows, distinct, first, last) != (high - low, high - low, low, high - 1):
                wrong.append(
                    f"{key[0]}[{key[1]}]: {rows} rows, {distinct} distinct offsets in "
                    f"[{first}, {last}], expected [{low}, {high})"
                )
        wrong += [f"{t}[{p}]: not a source partition" for t, p in set(found) - set(self.ranges)]
        if wrong:
            sys.exit(f"{path}: its output read back disagrees: " + "; ".join(wrong[:5]))
        return self.records


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    load = Path("/proc/loadavg").read_text().split()[:3]
    return {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "load": load}


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
    ).stdout.strip()
    return done.stdout.strip() + ("+dirty" if dirty else "") if done.returncode == 0 else "?"


def write_results(benchmark: str, payload: dict[str, Any]) -> Path:
    """`benchmarks/results/<benchmark>-<records or label>.json`, what charts.py draws: one
    file per benchmark and size, the latest run's, with its date, machine and commit."""
    RESULTS.mkdir(exist_ok=True)
    label = payload.get("records", payload.get("label", "all"))
    path = RESULTS / f"{benchmark}-{label}.json"
    body = {
        "benchmark": benchmark,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "commit": commit(),
        **payload,
    }
    path.write_text(json.dumps(body, indent=2, default=str) + "\n")
    print(f"results: {path}")
    return path
