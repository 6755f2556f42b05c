"""Soak: many consecutive small runs with producers running and crashes injected.

  .venv/bin/python benchmarks/soak.py                    # --runs 1000 --crash-rate 0.05

One fresh drain (3 levels x 2 partitions, budget 60, dataframe mode, one row per record). A
producer thread writes about 20 records a second to random levels and partitions throughout.
Each run is, with probability `--crash-rate`, a `drainer run` process that dies at a random
crash point (drainer.faults: before, during and after the Spark job, after the commit, inside
a partition fold), else an ordinary run in this process. Afterwards the producer stops, the
backlog is drained, and the check is that every produced record is in the sink exactly once.
Reported: crashes, the sink's partition count (the most seen and at the end), the state
tables' row counts for the drain, and the median, p99 and max seconds of the first and last 100
timed runs (halves for soaks under 200 runs): the max shows a run whose upkeep made a big fold,
which a median hides.
`soak()` is also the suite's short version (tests/integration/test_soak.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from drainer.settings import load_settings

DRAINER = Path(sys.executable).with_name("drainer")
# the drain's rows in each state table: what retention must keep bounded
_OF_RUNS = "run_id IN (SELECT id FROM runs WHERE drain = :d)"
STATE_TABLES = {
    "runs": "drain = :d",
    "run_levels": _OF_RUNS,
    "run_ranges": _OF_RUNS,
    "run_totals": "drain = :d",
    "partition_offsets": "drain = :d",
    "dead_letters": "drain = :d",
    "record_attempts": "drain = :d",
    "retention_losses": "drain = :d",
}


def crash_plan(runs: int, rate: float, seed: int) -> dict[int, str]:
    """Which runs crash, and where: `rate` of them, at random points."""
    from drainer import faults

    rng = random.Random(seed)
    points = (*faults.POINTS, *faults.FOLD_POINTS)
    return {i: rng.choice(points) for i in range(runs) if rng.random() < rate}


def _producer(drain: Any, stop: threading.Event, per_s: float) -> None:
    from drainer.kafka.producer import synthetic_records
    from tests.support.stack import produce_records

    rng, n = random.Random(7), 0
    while not stop.is_set():
        level, partition = rng.randrange(drain.levels), rng.randrange(drain.partitions)
        batch = list(synthetic_records(10, keys=20, seed=n))
        produce_records(drain, batch, level=level, partition=partition)
        n += 1
        stop.wait(10 / per_s)


def _crashing_run(drain: Any, point: str) -> int:
    env = {**os.environ, "DRAINER_FAULT": point}
    done = subprocess.run(
        [str(DRAINER), "run", drain.name, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # a fold point crashes only in a run whose upkeep folds; others finish normally
    if done.returncode not in (0, 86):
        raise RuntimeError(
            f"run with fault {point} exited {done.returncode}: {done.stderr[-2000:]}"
        )
    return done.returncode


def soak(drain: Any, runs: int, crashes: dict[int, str], produce_per_s: float = 20.0) -> dict:
    """Run the soak on `drain` (current in DRAINER_CONFIG); raises if a record is not once."""
    from sqlalchemy import text

    from drainer.kafka.session import KafkaSession
    from drainer.lifecycle.planning import partition_states
    from drainer.lifecycle.upkeep import maintain_drain
    from drainer.sinks.postgres_folds import FANOUT
    from drainer.store import sink_partitions
    from spark_jobs import drain_job
    from tests.support.stack import get_engine

    engine = get_engine()
    table = drain.sink.table

    def partitions() -> int:
        with engine.connect() as conn:
            return len(sink_partitions.partitions(conn, table))

    stop = threading.Event()
    producer = threading.Thread(target=_producer, args=(drain, stop, produce_per_s), daemon=True)
    producer.start()
    seconds: list[float] = []
    crashed, most = 0, 0
    try:
        for i in range(runs):
            started = time.perf_counter()
            if i in crashes:
                crashed += _crashing_run(drain, crashes[i]) == 86
            else:
                # wait for the lease, as a schedule's run would: the server may take a moment
                # to notice that a crashed run's connection (and its lock) is gone
                result = drain_job.run(
                    drain.name, trigger="soak", wait_s=30, settings=load_settings()
                )
                seconds.append(time.perf_counter() - started)
                assert not result.warnings, result.warnings
            most = max(most, partitions())
    finally:
        stop.set()
        producer.join()
    levels = list(range(drain.levels))
    with KafkaSession(drain, load_settings()) as kafka:
        while sum(p.backlog for p in partition_states(engine, drain, levels, kafka)):
            drain_job.run(drain.name, trigger="soak", wait_s=30, settings=load_settings())
        maintain_drain(drain, settings=load_settings())
        marks = kafka.watermarks(kafka.partitions(levels))
    expected = {(drain.level_topic(lvl), p): wm.high for (lvl, p), wm in marks.items()}
    with engine.connect() as conn:
        rows = Counter(
            (r.topic, r.partition, r.offset)
            for r in conn.execute(text(f'SELECT topic, partition, "offset" FROM "{table}"'))
        )
        sizes = {
            t: conn.scalar(text(f"SELECT count(*) FROM {t} WHERE {where}"), {"d": drain.name})
            for t, where in STATE_TABLES.items()
        }
        final = sink_partitions.partitions(conn, table)
    twice = [k for k, n in rows.items() if n > 1]
    missing = [
        (topic, p, o)
        for (topic, p), high in expected.items()
        for o in range(high)
        if (topic, p, o) not in rows
    ]
    assert not twice and not missing, f"twice {twice[:5]}, missing {missing[:5]}"
    tiers = Counter(p.tier(FANOUT) for p in final)
    assert all(n < FANOUT for n in tiers.values()), tiers
    window = max(1, min(100, len(seconds) // 2))
    return {
        "runs": runs,
        "crashes_planned": len(crashes),
        "crashed": crashed,
        "records": sum(expected.values()),
        "partitions_most": most,
        "partitions_final": len(final),
        "state_rows": sizes,
        "first_runs_s": spread(seconds[:window]),
        "last_runs_s": spread(seconds[-window:]),
        "window": window,
    }


def spread(seconds: list[float]) -> dict[str, float]:
    """Median, p99 and max of some runs' seconds."""
    p99 = statistics.quantiles(seconds, n=100, method="inclusive")[98] if len(seconds) > 1 else 0
    return {
        "median": round(statistics.median(seconds), 3),
        "p99": round(p99 or seconds[0], 3),
        "max": round(max(seconds), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--crash-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import OUT, fresh_drain

    drain = fresh_drain(
        60, levels=3, partitions=2, processor="spark_jobs.examples:one_row_per_record"
    )
    report = soak(drain, args.runs, crash_plan(args.runs, args.crash_rate, args.seed))
    (OUT / "soak.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
