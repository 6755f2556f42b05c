"""What stands between drainer's Delta append and Spark reading the same ranges into `noop`
(issue 51), rung by rung.

  .venv/bin/python benchmarks/delta_phases.py      # --records 10000000 --repeat 5

N records (100-byte values over 1,000 keys, 3 levels x 4 partitions) are produced once, then
each round times every rung on the same ranges, with drainer's read options, on the same warm
Connect server (each round starts one rung later):

- `read_noop`: Spark reading the ranges into `noop` (the limit lakehouse_sinks.py reports);
- `projected_noop`: the same read through `one_row_per_record`'s projection (the rows drainer's
  benchmark drain writes), into `noop`;
- `counted_noop`: the same with an observation that only counts the read's records
  (`count(1)`): what observing the read costs at all, apart from the sums of its bytes;
- `observed_noop`: the same, the read counted as a drainer run counts it (its records and bytes
  per level, `spark_jobs.kafka_source.counted`), into `noop`;
- `delta_append`: the projected rows appended to a new Delta table by a plain Spark batch job:
  what a Delta write costs on top of the read;
- `delta_append_observed`: that job with the read counted as drainer counts it;
- `drainer`: a drainer run of its own drain (dataframe mode, `one_row_per_record`, the budget the
  backlog), timed whole; its phases (plan, Spark job, the sink's steps, Postgres commit, mirror)
  are kept.

`--rungs` times some of them (in this order). Each rung's median is printed with what it adds
to the rung before and its ratio to the first rung timed (`read_noop` unless left out).
Every Delta table is read back without Spark and must hold each record once. Results:
`benchmarks/results/delta_phases-<N>.json`. Topics and tables are removed afterwards unless
`--keep`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import uuid
from typing import Any

import fair
import readback
from common import fresh_drain, produce
from lakehouse_sinks import PROCESSOR, Jvm, delta_path, drain_for, projection, run_drainer

from drainer.settings import load_settings

RUNGS = (
    "read_noop",
    "projected_noop",
    "counted_noop",
    "observed_noop",
    "delta_append",
    "delta_append_observed",
    "drainer",
)


def stored_ranges(source: Any) -> list[Any]:
    """The backlog's ranges as a drainer run holds them (`counted` takes these)."""
    from drainer.level_topics import topic_level
    from drainer.store.runs import StoredRange

    assign, start, end = fair.kafka_ranges(source)
    return [
        StoredRange(topic, topic_level(topic), p, start[topic][str(p)], end[topic][str(p)], "", 1)
        for topic, partitions in assign.items()
        for p in partitions
    ]


def rows_of(spark: Any, source: Any, observed: bool, count_only: bool = False) -> Any:
    """The projected rows of the backlog, the read counted as a drainer run counts it
    (`count_only`: its records only, in an observation of their own)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from spark_jobs.kafka_source import counted

    read = fair.bounded_read(spark, source, fair.drain_read_options(source))
    if count_only:
        read = read.observe(Observation(f"records_{uuid.uuid4().hex}"), F.count(F.lit(1)))
    elif observed:
        ranges = stored_ranges(source)
        full = {(r.topic, r.partition): r.end - r.start for r in ranges}
        levelled = read.withColumn("level", F.substring_index("topic", "-", -1).cast("int"))
        read, _ = counted(levelled, ranges, bytes_by="level", full=full)
        read = read.drop("level")
    return projection(read)


def one_rung(spark: Any, rung: str, source: Any, records: int, made: list[str]) -> dict:
    """One timed run of a rung; a Delta table it made is read back (exit 1 when it disagrees)."""
    if rung == "drainer":
        drain = drain_for("delta", source, records)
        where = delta_path(drain.name)
        made.append(where)
        got = run_drainer(drain, records, Jvm(None))  # no memory probe: this one times
    else:
        rows = rows_of(spark, source, "observed" in rung, count_only=rung == "counted_noop")
        started = time.perf_counter()
        if rung.endswith("noop"):
            rows.write.format("noop").mode("overwrite").save()
            return {"wall_s": round(time.perf_counter() - started, 2)}
        where = delta_path(f"phases_{uuid.uuid4().hex[:8]}")
        rows.write.format("delta").save(where)
        got = {"wall_s": round(time.perf_counter() - started, 2)}
        made.append(where)
    fair.Expected.of_drain(source).check(rung, readback.table("delta", where))
    return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--keep", action="store_true", help="leave topics and tables")
    parser.add_argument("--rungs", nargs="+", choices=RUNGS, default=list(RUNGS))
    args = parser.parse_args()
    rungs = [r for r in RUNGS if r in args.rungs]
    from spark_jobs.session import get_spark

    warm = fresh_drain(args.warmup, processor=PROCESSOR)
    produce(warm, args.warmup)
    source = fresh_drain(args.records, processor=PROCESSOR)  # its topics; never run itself
    produce(source, args.records)
    spark = get_spark(load_settings())
    made: list[str] = []
    for rung in rungs:  # first writes load classes, the JIT compiles
        one_rung(spark, rung, warm, args.warmup, made)
    runs: list[dict[str, Any]] = []
    for round_ in range(args.repeat):
        for rung in rungs[round_ % len(rungs) :] + rungs[: round_ % len(rungs)]:
            got = one_rung(spark, rung, source, args.records, made)
            runs.append({"path": rung, "round": round_, **got})
            print(f"{args.records:,} {rung}: {got['wall_s']:.2f} s", file=sys.stderr)
    rows = summary(runs, rungs)
    print(table(args.records, rows))
    if not args.keep:
        for where in made:
            shutil.rmtree(where, ignore_errors=True)
    fair.write_results(
        "delta_phases",
        {
            "records": args.records,
            "repeat": args.repeat,
            "settings": fair.drain_read_options(source),
            "rows": rows,
            "runs": runs,
        },
    )
    return 0


def summary(runs: list[dict[str, Any]], rungs: list[str]) -> list[dict[str, Any]]:
    """Each rung's median, what it adds to the rung before, its ratio to the first rung (the
    read, unless `--rungs` left it out); drainer's phase medians."""
    rows: list[dict[str, Any]] = []
    floor = fair.median([r["wall_s"] for r in runs if r["path"] == rungs[0]])
    before = None
    for rung in rungs:
        mine = [r for r in runs if r["path"] == rung]
        wall = fair.median([r["wall_s"] for r in mine])
        row: dict[str, Any] = {
            "path": rung,
            "wall_s": round(wall, 2),
            "runs_s": [r["wall_s"] for r in mine],
            "adds_s": None if before is None else round(wall - before, 2),
            "over_read_noop": round(wall / floor, 2),
        }
        if rung == "drainer":
            names = sorted({k for r in mine for k in r.get("phases", {})})
            row["phases"] = {
                k: round(fair.median([r["phases"].get(k, 0.0) for r in mine]), 2) for k in names
            }
        rows.append(row)
        before = wall
    return rows


def table(records: int, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"Delta append, rung by rung: {records:,} records, medians",
        "| rung | wall (s) | adds (s) | over read_noop |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        adds = "" if row["adds_s"] is None else f"{row['adds_s']:+.2f}"
        lines.append(f"| {row['path']} | {row['wall_s']:.2f} | {adds} | {row['over_read_noop']}x |")
    phases = next((r.get("phases") for r in rows if r["path"] == "drainer"), None)
    if phases:
        lines.append("drainer's phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
