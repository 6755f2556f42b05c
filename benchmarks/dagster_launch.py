"""Launch to success of one UI-launched run on a 3,000-record backlog, split into its parts.

Starts `dagster-webserver` + `dagster-daemon` on a temporary DAGSTER_HOME (as the integration
tests do), then twice produces 1,000 records at each of 3 levels and launches a run of all
levels through the UI's GraphQL mutations, and reads the times back:
- "run": one run of the partition range 0..2 (`launchPipelineExecution`, what the UI sends to
  materialize one partition, or a range as a single run);
- "backfill": "Materialize all" (`launchPartitionBackfill`: Dagster's backfill daemon, which
  wakes every 30 s, turns it into one run).
Both after one warm-up run. The parts:

  queue + run start   launch → the run process reports RUN_START (daemon pick-up, run queue,
                      a new Python process loading the definitions)
  Spark start         the run's `run_spark_start_s` (a cold local Spark session in the process)
  drain               plan + Spark job + commit + mirror (`run_*_s` metadata)
  rest                the step's other work (checks, metadata, events) and the run's end

Usage: DRAINER_DATABASE_URL=... python benchmarks/dagster_launch.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import yaml

from drainer.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import delete_at_exit  # noqa: E402
from dagster_project.definitions import RANGE_END, RANGE_START  # noqa: E402
from drainer.config import load_drains  # noqa: E402
from drainer.kafka.producer import synthetic_records  # noqa: E402
from drainer.kafka.session import KafkaSession  # noqa: E402
from tests.integration.dagster_stack import DagsterStack  # noqa: E402
from tests.support.stack import produce_records  # noqa: E402


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="drainer-bench-dagster-"))
    name = f"bench_{uuid.uuid4().hex[:6]}"
    path = work / "drains.yaml"
    body = {"topic": name, "group": f"g_{name}", "levels": 3, "partitions": 4, "budget": 70000}
    body |= {"schedule": None, "sink": {"type": "postgres", "table": f"sink_{name}"}}
    path.write_text(yaml.safe_dump({"drains": {name: body}}))
    drain = load_drains(path)[name]
    with KafkaSession(drain, load_settings()) as kafka:
        kafka.create_topics()
    delete_at_exit(drain)
    for level in range(3):
        produce_records(drain, synthetic_records(1000, seed=level), level=level)
    env = {**os.environ, "DRAINER_CONFIG": str(path), "PYTHONPATH": str(REPO)}
    stack = DagsterStack(home=work / "home", env=env).start()
    try:
        # warm-up: the first run of a fresh deployment also opens this code's Spark session
        stack.wait_run(stack.launch_run(name, {RANGE_START: "0", RANGE_END: "2"}))
        results = []
        for path_name in ("run", "backfill"):
            for level in range(3):
                produce_records(drain, synthetic_records(1000, seed=level), level=level)
            launched = time.time()
            if path_name == "run":
                run = stack.wait_run(stack.launch_run(name, {RANGE_START: "0", RANGE_END: "2"}))
            else:
                (run,) = stack.wait_backfill(stack.launch_backfill(name))
            assert run["status"] == "SUCCESS", run
            meta = next(
                m["metadata"] for m in stack.materializations(name) if m["runId"] == run["runId"]
            )
            results.append((path_name, launched, run, meta))
    finally:
        stack.stop()
    for path_name, launched, run, meta in results:
        _report(path_name, launched, run, meta)


def _report(path_name: str, launched: float, run: dict, meta: dict) -> None:
    start, end = run["startTime"], run["endTime"]
    spark = meta["run_spark_start_s"]
    drain_s = sum(meta[f"run_{p}_s"] for p in ("plan", "spark_job", "commit", "mirror"))
    rows = [
        ("launch to success", end - launched),
        ("queue + run start", start - launched),
        ("Spark start", spark),
        ("drain (plan + job + commit + mirror)", drain_s),
        ("rest (checks, metadata, run end)", end - start - spark - drain_s),
    ]
    how = {
        "run": "one run (launchPipelineExecution, levels 0..2)",
        "backfill": "Materialize all (launchPartitionBackfill)",
    }[path_name]
    print(f"{datetime.now():%Y-%m-%d} {how}: {meta['run_drained']} records, run {run['runId'][:8]}")
    for label, seconds in rows:
        print(f"  {label:<40} {seconds:6.1f} s")
    for p in ("plan", "spark_job", "commit", "mirror"):
        print(f"    {p:<38} {meta[f'run_{p}_s']:6.2f} s")


if __name__ == "__main__":
    main()
