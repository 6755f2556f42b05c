"""Issue 8 acceptance: kill -9 at random moments never loses or duplicates a record.

200,000 records; `drainer run` processes (each its own process group: Python, the Spark JVM and
its Python workers) are killed with SIGKILL after a random delay, at least ten times; then runs
go on until the backlog is 0. Every (topic, partition, offset) must be in the record_echo sink
exactly once, and the Kafka group offsets must equal the end offsets. The seed is printed (and
can be set with CHAOS_SEED) so a failure can be replayed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import tempfile
import time

import pytest
from lifecycle_helpers import CLI, sink_records
from offsets import high_watermarks, kafka_offsets, states, stored_offsets

from drainer.kafka.producer import produce_records, synthetic_records
from spark_jobs import drain_job
from spark_jobs.examples import RECORD_ECHO_SCHEMA

RECORDS = 200_000
KILLS = 10
LEVELS, PARTITIONS = 2, 2
BUDGET = 15_000  # many runs' worth of backlog: kills land in fresh plans and resumed ones alike


def _backlog(drain) -> int:
    return sum(p.backlog for p in states(drain, list(range(LEVELS))))


def _start_run(drain, log) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "DRAINER_FAULT"}
    return subprocess.Popen(
        [*CLI, "run", drain.name],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,  # its own process group: the kill takes the JVM and workers too
    )


@pytest.mark.slow
@pytest.mark.timeout(2400)  # many crash-and-resume rounds
def test_kill_minus_9_at_random_moments_loses_and_duplicates_nothing(make_drain, spark):
    seed = int(os.environ.get("CHAOS_SEED") or time.time_ns() % 1_000_000)
    print(f"chaos seed: {seed} (replay with CHAOS_SEED={seed})")
    rng = random.Random(seed)
    drain = make_drain(
        levels=LEVELS,
        partitions=PARTITIONS,
        budget=BUDGET,
        mode="record",
        handler="spark_jobs.examples:record_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        ordering="partition",
    )
    per_partition = RECORDS // (LEVELS * PARTITIONS)
    for level in range(LEVELS):
        for partition in range(PARTITIONS):
            records = synthetic_records(per_partition, keys=97, value_size=20, seed=partition)
            produce_records(drain, records, level=level, partition=partition)
    assert _backlog(drain) == RECORDS

    with tempfile.TemporaryFile("w+") as log:
        # one undisturbed run tells how long a run takes here; kills then fall anywhere in it
        started = time.monotonic()
        proc = _start_run(drain, log)
        assert proc.wait(timeout=600) == 0, _tail(log)
        duration = time.monotonic() - started
        kills, completed = 0, 1
        while kills < KILLS:
            delay = rng.uniform(0.2, duration * 0.9)  # mostly killed, now and then done
            proc = _start_run(drain, log)
            try:
                code = proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)
                kills += 1
                print(f"killed run process after {delay:.1f} s")
                continue
            assert code == 0, _tail(log)
            completed += 1
            print(f"run process finished within {delay:.1f} s")
    print(f"{kills} kills, {completed} completed runs; one run takes {duration:.1f} s")

    # the rest in this process, on the shared Spark session: first whatever plan the last kill
    # left open (resumed as planned), then one run with a budget for all that is left
    whole = drain.model_copy(update={"budget": RECORDS})
    runs = 0
    while _backlog(drain) > 0:
        runs += 1
        assert runs <= 3, f"backlog {_backlog(drain)} is not shrinking"
        drain_job.run(whole, trigger="test")

    sink = sink_records(drain)
    expected = {
        (drain.level_topic(level), partition, offset)
        for level in range(LEVELS)
        for partition in range(PARTITIONS)
        for offset in range(per_partition)
    }
    duplicated = {key: n for key, n in sink.items() if n > 1}
    assert not duplicated, f"{len(duplicated)} records published twice, e.g. {list(duplicated)[:5]}"
    missing = expected - set(sink)
    assert not missing, f"{len(missing)} records never published, e.g. {sorted(missing)[:5]}"
    assert set(sink) == expected
    ends = high_watermarks(drain)
    assert stored_offsets(drain) == {key: (end, "") for key, end in ends.items()}
    assert kafka_offsets(drain) == {key: (end, "") for key, end in ends.items()}


def _tail(log) -> str:
    log.seek(0)
    return log.read()[-4000:]
