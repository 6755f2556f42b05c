"""What Delta's log replay costs a small run and `drainer maintain`, by the tasks it runs in.

    .venv/bin/python benchmarks/delta_log_replay.py [--runs 15] [--maintains 3] [--records 1000]

Delta replays its transaction log (loading a snapshot, the checkpoint every 10 commits, OPTIMIZE
and VACUUM) in `spark.databricks.delta.snapshotPartitions` tasks: 50 by default, sized for a
cluster. drainer's sessions set it to `DRAINER_SHUFFLE_PARTITIONS` (8). A fresh Delta drain (2
levels x 2 partitions, `one_row_per_record`) is run `--runs` times with `--records` records each,
the setting rotating between 2, drainer's and Delta's 50 from run to run on the same warm
session, so a machine that gets busier weighs on each alike; then the table's maintenance
(`OPTIMIZE`, then `VACUUM` with retention 0, as `drainer maintain --retention-hours 0 --force`
runs them) is timed `--maintains` times with each. Medians; raw numbers in
`benchmarks/out/delta_log_replay.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from drainer.settings import load_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import OUT, fresh_drain  # noqa: E402

SETTING = "spark.databricks.delta.snapshotPartitions"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--maintains", type=int, default=3)
    parser.add_argument("--records", type=int, default=1000)
    args = parser.parse_args()

    from drainer.kafka.producer import synthetic_records
    from spark_jobs import drain_job
    from spark_jobs.session import get_spark
    from spark_jobs.sinks import spark_sink_for
    from tests.support.stack import produce_records

    total = args.records * (args.runs + 1)
    drain = fresh_drain(
        args.records,
        levels=2,
        partitions=2,
        mode="dataframe",
        processor="spark_jobs.examples:one_row_per_record",
        sink={"type": "delta", "path": f"replay_{time.time_ns()}"},
    )
    for level in range(drain.levels):
        produce_records(drain, synthetic_records(total // drain.levels, seed=level), level=level)
    spark = get_spark(load_settings())
    drainers = str(spark.conf.get(SETTING))
    values = sorted({"2", drainers, "50"}, key=int)
    # creates the table; warms the session
    drain_job.run(drain, trigger="benchmark", settings=load_settings())
    runs: dict[str, list[float]] = {v: [] for v in values}
    for i in range(args.runs):
        value = values[i % len(values)]
        spark.conf.set(SETTING, value)
        started = time.monotonic()
        drain_job.run(drain, trigger="benchmark", settings=load_settings())
        runs[value].append(time.monotonic() - started)

    table = spark_sink_for(drain.sink, load_settings())
    maintains: dict[str, list[float]] = {v: [] for v in values}
    for _ in range(args.maintains):
        for value in values:
            spark.conf.set(SETTING, value)
            started = time.monotonic()
            table.maintain_table(spark, 0, force=True)  # what `drainer maintain` runs on Spark
            maintains[value].append(time.monotonic() - started)
    spark.conf.set(SETTING, drainers)

    print(f"{args.records} records per run, 2 levels x 2 partitions, into Delta")
    print(f"{'snapshotPartitions':>20} {'small run (s)':>14} {'OPTIMIZE + VACUUM (s)':>22}")
    for value in values:
        label = value + (" (drainer)" if value == drainers else "") + (" (Delta)" * (value == "50"))
        run_s, maint_s = statistics.median(runs[value]), statistics.median(maintains[value])
        print(f"{label:>20} {run_s:>14.2f} {maint_s:>22.2f}")
    OUT.mkdir(exist_ok=True)
    (OUT / "delta_log_replay.json").write_text(
        json.dumps({"runs": runs, "maintains": maintains}, indent=2)
    )


if __name__ == "__main__":
    main()
