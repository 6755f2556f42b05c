"""A run's cost by partition count: the same records on 3 levels x 4, 16, 64 and 256 partitions
(12, 48, 192 and 768 in all), a whole `drainer run` each (issue 51).

  .venv/bin/python benchmarks/partitions.py      # --records 192000 --repeat 5

Per partition count, N records (100-byte values over 1,000 keys, spread over the levels and, by
key, over the partitions) are produced once into a fresh drain's topics. Each timed run is a
new drain over those topics (its own group, offsets and Postgres table), dataframe mode with
`spark_jobs.examples:one_row_per_record`, budget = N: `drainer run <drain> --json` as a whole
process, launch to exit, after one untimed run that warms the Connect session. Its table is
read back with psycopg by distinct source coordinates (`readback.postgres`): a run whose table
is not exactly the N records, each once, fails the benchmark (exit 1).

Printed: per count the median wall time, the Spark job's and the ratio to the smallest count
(issue 51 asks 192 partitions within 1.5x of 12). Results:
`benchmarks/results/partitions-<N>.json` (charts.py draws `partitions.png`).

`--rerun`: one drain run again instead, as a schedule runs it: before each run N / (repeat + 1)
new records are produced, and the same drain drains them (its Spark reads keep the drain's group
id, so the Connect server's pooled consumers of its partitions can serve it again); its table is
read back once, at the end. Results: `benchmarks/results/partitions_rerun-<N>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import fair
import readback
from common import OUT, delete_at_exit, fresh_drain, produce

LEVELS = 3
PROCESSOR = "spark_jobs.examples:one_row_per_record"


def reader(source: Any, records: int) -> tuple[Any, str]:
    """A new drain over `source`'s topics: its own group, offsets and table."""
    from tests.support.drains import create_drain

    drain, config = create_drain(
        OUT,
        prefix="bench_part",
        levels=source.levels,
        partitions=source.partitions,
        budget=max(records, 2**LEVELS),
        topic=source.topic,
        processor=PROCESSOR,
    )
    return drain, str(config)


def drainer_run(drain: Any, config: str) -> tuple[float, dict[str, Any]]:
    env = {**os.environ, "DRAINER_CONFIG": config}
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", drain.name, "--json"]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"drainer run {drain.name} failed:\n{done.stderr[-3000:]}")
    out = done.stdout
    return wall, json.loads(out[out.index("{") : out.rindex("}") + 1])


def drop_table(table: str) -> None:
    import psycopg

    with psycopg.connect(readback_url()) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def readback_url() -> str:
    from drainer.settings import load_settings, psycopg_url

    return psycopg_url(load_settings().database_url)


def one_count(per_level: int, records: int, repeat: int) -> dict[str, Any]:
    source = fresh_drain(records, levels=LEVELS, partitions=per_level, processor=PROCESSOR)
    produce(source, records)
    expected = fair.Expected.of_drain(source)
    assert expected.records == records, f"{expected.records} of {records} produced"
    warm, warm_config = reader(source, records)
    drainer_run(warm, warm_config)
    drop_table(warm.sink.table)
    walls: list[float] = []
    phases: list[dict[str, float]] = []
    for _ in range(repeat):
        drain, config = reader(source, records)
        wall, result = drainer_run(drain, config)
        assert result["drained"] == records, result
        expected.check(f"{LEVELS}x{per_level}", readback.postgres(drain.sink.table))
        drop_table(drain.sink.table)
        (OUT / f"{drain.name}.yaml").unlink(missing_ok=True)
        walls.append(wall)
        phases.append(result["phases"])
        print(f"{LEVELS} x {per_level}: {wall:.2f} s, read back", flush=True)
    (OUT / f"{warm.name}.yaml").unlink(missing_ok=True)
    delete_at_exit(source)
    return _row(per_level, records, walls, phases)


def one_count_rerun(per_level: int, records: int, repeat: int) -> dict[str, Any]:
    """The same drain run `repeat` times (after a warm-up run), each on N / (repeat + 1) new
    records: what a scheduled drain pays per run at this partition count."""
    source = fresh_drain(records, levels=LEVELS, partitions=per_level, processor=PROCESSOR)
    drain, config = reader(source, records)
    per_run = records // (repeat + 1)
    walls: list[float] = []
    phases: list[dict[str, float]] = []
    for i in range(repeat + 1):
        produce(source, per_run)
        wall, result = drainer_run(drain, config)
        assert result["drained"] == per_run, result
        if i == 0:
            continue  # the warm-up: the session, the drain's first offsets
        walls.append(wall)
        phases.append(result["phases"])
        print(f"{LEVELS} x {per_level}, run {i}: {wall:.2f} s", flush=True)
    expected = fair.Expected.of_drain(source)
    expected.check(f"{LEVELS}x{per_level} rerun", readback.postgres(drain.sink.table))
    drop_table(drain.sink.table)
    (OUT / f"{drain.name}.yaml").unlink(missing_ok=True)
    delete_at_exit(source)
    return _row(per_level, per_run, walls, phases)


def _row(
    per_level: int, records: int, walls: list[float], phases: list[dict[str, float]]
) -> dict[str, Any]:
    """One partition count's result: medians of the runs' wall times and phases."""
    return {
        "partitions_per_level": per_level,
        "partitions_total": LEVELS * per_level,
        "records": records,
        "wall_s": fair.median(walls),
        "runs_s": [round(w, 3) for w in walls],
        "spark_job_s": fair.median([p.get("spark_job", 0.0) for p in phases]),
        "phases": {k: fair.median([p.get(k, 0.0) for p in phases]) for k in phases[0]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=192_000)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per count (median)")
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[4, 16, 64, 256],
        help="partitions per level (3 levels)",
    )
    parser.add_argument(
        "--rerun", action="store_true", help="one drain run again on new records each time"
    )
    args = parser.parse_args()
    count = one_count_rerun if args.rerun else one_count
    rows = [count(p, args.records, args.repeat) for p in args.partitions]
    base = rows[0]
    what = f"{rows[0]['records']:,} new records a run, one drain" if args.rerun else "records"
    print(f"\n{args.records:,} {what}, whole `drainer run`, medians of {args.repeat}")
    print("| partitions | wall (s) | Spark job (s) | x the fewest partitions |")
    print("|---:|---:|---:|---:|")
    for row in rows:
        row["over_fewest"] = round(row["wall_s"] / base["wall_s"], 2)
        print(
            f"| {row['partitions_total']} | {row['wall_s']:.2f} | {row['spark_job_s']:.2f} | "
            f"{row['over_fewest']:.2f}x |"
        )
    print(
        "settings: drainer's defaults (kafka.fetch.max.wait.ms=10, kafka.max.poll.records="
        "10000), sink postgres, one_row_per_record"
    )
    name = "partitions_rerun" if args.rerun else "partitions"
    fair.write_results(name, {"records": args.records, "repeat": args.repeat, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
