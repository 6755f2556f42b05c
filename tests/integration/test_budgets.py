"""Issue 19, time-boxed runs and byte budgets, on the real stack (Kafka, Postgres, Spark).

A drain with `run_seconds` gets its configured budget on its first run and a budget derived
from its measured throughput afterwards (`runs.budget`, `drainer plan --json`, `drainer status
--json`); a drain with `budget_bytes` and records of 10 KB at one level and 100 bytes at
another plans within the byte budget, and the Spark job's byte counts back the estimate.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from sqlalchemy import text

from drainer.allocation.timebox import RunThroughput, timeboxed_budget
from drainer.kafka.producer import OutRecord, synthetic_records
from drainer.settings import load_settings
from spark_jobs import drain_job
from tests.support.stack import get_engine, produce_records


def _cli(command: str, drain, *args: str) -> dict:
    """`drainer <command> <drain> [args] --json` in a subprocess, as an operator would run it."""
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", command, drain.name, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _runs(drain) -> list[dict]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                "SELECT r.id, r.budget, r.duration_s, r.slot_s, sum(rl.drained) AS drained, "
                "sum(rl.read_bytes) AS read_bytes, sum(rl.planned) AS planned "
                "FROM runs r JOIN run_levels rl ON rl.run_id = r.id WHERE r.drain = :d "
                "AND r.status = 'committed' GROUP BY r.id ORDER BY r.id"
            ),
            {"d": drain.name},
        ).mappings()
        return [
            {k: int(v) if k in ("drained", "read_bytes", "planned") else v for k, v in row.items()}
            for row in rows
        ]


def test_a_time_boxed_drain_uses_its_budget_first_and_its_throughput_after(make_drain, spark):
    """run_seconds 1 with budget 70,000: the first run (no history) gets 70,000; the next one
    the records/s of the first over its whole slot (`slot_s`, through commit, mirror and upkeep,
    longer than the pre-commit `duration_s`) times one second, lowered by the factor the
    first run overshot its one-second slot if it did (a warm local Spark drains 3,000 records in
    half a second; one on a busy machine takes longer). No Spark run drains 3,000 records in the
    43 ms that would make the estimate reach the cap."""
    drain = make_drain(budget=70_000, run_seconds=1)
    produce_records(drain, synthetic_records(3000, keys=5, seed=1), level=0, partition=0)

    first_plan = _cli("plan", drain)
    assert first_plan["budget"] == first_plan["budget_cap"] == 70_000
    assert first_plan["run_budget"]["run_seconds_throughput"]["records_per_s"] is None
    first = drain_job.run(drain, trigger="test", settings=load_settings())
    (stored,) = _runs(drain)
    assert stored["id"] == first.run_id and stored["budget"] == 70_000
    assert stored["drained"] == 3000 and stored["read_bytes"] > 3000  # key + value bytes

    # the slot reaches past the commit: what the run's caller saw, more than duration_s
    assert stored["slot_s"] == pytest.approx(first.duration_s, abs=0.001)
    assert stored["slot_s"] > stored["duration_s"]
    produce_records(drain, synthetic_records(3000, keys=5, seed=2), level=0, partition=0)
    recent = [RunThroughput(3000, stored["slot_s"], stored["read_bytes"])]
    expected = timeboxed_budget(1, 70_000, recent, minimum=7)
    assert expected.budget < 70_000
    plan = _cli("plan", drain)
    used = plan["run_budget"]["run_seconds_throughput"]
    assert plan["budget"] == expected.budget and plan["budget_cap"] == 70_000
    assert used["records_per_s"] == expected.records_per_s
    # the bytes/s of the run, lowered by the same factor (slot / the run's seconds) if it overshot
    seconds = stored["slot_s"]
    byte_rate = stored["read_bytes"] / seconds / max(1.0, seconds)
    assert used["bytes_per_s"] == expected.bytes_per_s == pytest.approx(byte_rate)
    assert ("lowered" in used["reason"]) == (seconds > 1)
    assert plan["total_planned"] <= expected.budget

    status = _cli("status", drain)
    assert status["run_budget"]["budget"] == expected.budget
    assert status["run_budget"]["run_seconds_throughput"]["records_per_s"] == (
        expected.records_per_s
    )

    second = drain_job.run(drain, trigger="test", settings=load_settings())
    latest = _runs(drain)[-1]
    assert latest["id"] == second.run_id and latest["budget"] == expected.budget
    assert latest["planned"] == second.drained <= expected.budget


def _produce_sized(drain, level: int, count: int, value_bytes: int) -> None:
    records = (OutRecord(value=b"v" * value_bytes, key=b"k") for _ in range(count))
    produce_records(drain, records, level=level, partition=0)


def test_a_byte_budget_keeps_large_records_from_filling_a_run_of_small_ones(make_drain, spark):
    """budget 7000 (reserving 1000 / 2000 / 4000) and budget_bytes 2 MB; level 0 holds 2,000
    records of 10 KB, level 1 3,000 of 100 bytes. By records alone level 0 would read 4,000
    (40 MB). The byte budget plans level 1's 3,000 (300 KB) and as many 10 KB records of
    level 0 as the rest of 2 MB holds, first from a Kafka sample, then from the sizes the
    Spark job measured."""
    drain = make_drain(budget=7000, budget_bytes="2MB")
    _produce_sized(drain, 0, 2000, 10_000 - 1)  # key + value: 10,000 bytes
    _produce_sized(drain, 1, 3000, 100 - 1)  # 100 bytes

    plan = _cli("plan", drain)
    levels = {lv["level"]: lv for lv in plan["levels"]}
    assert plan["run_budget"]["budget_bytes"] == 2_000_000
    assert sorted(plan["run_budget"]["sampled"]) == [[0, 0], [1, 0]]
    assert levels[1]["planned"] == 3000 and levels[1]["planned_bytes"] == 300_000
    assert levels[0]["planned"] == (2_000_000 - 300_000) // 10_000 == 170
    assert plan["planned_bytes"] <= 2_000_000

    result = drain_job.run(drain, trigger="test", settings=load_settings())
    (stored,) = _runs(drain)
    assert stored["id"] == result.run_id and stored["drained"] == 3170
    assert stored["read_bytes"] == 3000 * 100 + 170 * 10_000 <= 2_000_000

    # now the sizes come from what the run measured: nothing is sampled, the same numbers
    again = _cli("plan", drain)
    assert again["run_budget"]["sampled"] == []
    sizes = {
        (s["level"], s["partition"]): s["avg_bytes"] for s in again["run_budget"]["record_bytes"]
    }
    assert sizes == {(0, 0): 10_000.0, (1, 0): 100.0}
    assert {lv["level"]: lv["planned"] for lv in again["levels"]}[0] == 200  # 2 MB of level 0


def test_the_kafka_sample_and_the_spark_job_count_headers_as_record_bytes(make_drain, spark):
    """Records of key 1 + value 99 + headers ("h", 5 bytes) and ("ü", none) are 108 bytes
    (the header key "ü" is 2 bytes of UTF-8): the planner's Kafka sample and the Spark job's
    count say the same. Fails if either counts key+value only (100)."""
    drain = make_drain(budget=7000, budget_bytes="1MB")

    def produce(count: int) -> None:
        record = OutRecord(value=b"v" * 99, key=b"k", headers=[("h", b"12345"), ("\u00fc", None)])
        produce_records(drain, [record] * count, level=0, partition=0)

    produce(50)

    plan = _cli("plan", drain)
    assert plan["run_budget"]["sampled"] == [[0, 0]]
    sizes = [
        (s["level"], s["partition"], s["avg_bytes"]) for s in plan["run_budget"]["record_bytes"]
    ]
    assert sizes == [(0, 0, 108.0)]

    drain_job.run(drain, trigger="test", settings=load_settings())
    (stored,) = _runs(drain)
    assert stored["drained"] == 50 and stored["read_bytes"] == 50 * 108
    produce(10)  # now the size comes from what the run measured, not from a sample
    again = _cli("plan", drain)
    assert again["run_budget"]["sampled"] == []
    assert [s["avg_bytes"] for s in again["run_budget"]["record_bytes"]] == [108.0]


def test_record_mode_and_a_pruned_read_measure_their_bytes_too(make_drain, spark):
    """The bytes come from the read's observation in both modes; a dataframe processor whose
    output is empty by construction (Spark prunes the read) counts them by reading again."""
    from spark_jobs.examples import RECORD_ECHO_SCHEMA

    for drain in (
        make_drain(
            mode="record",
            handler="spark_jobs.examples:record_echo",
            output_schema=RECORD_ECHO_SCHEMA,
            measure_bytes=True,
        ),
        make_drain(processor="tests.processors:nothing_kept", measure_bytes=True),
    ):
        _produce_sized(drain, 2, 50, 300 - 1)
        result = drain_job.run(drain, trigger="test", settings=load_settings())
        (stored,) = _runs(drain)
        assert stored["id"] == result.run_id and stored["drained"] == 50
        assert stored["read_bytes"] == 50 * 300, drain.mode
