"""Issue 8, point 1: Kafka retention never wedges a drain, and every loss is on record.

Retention is made to happen with the AdminClient's delete_records, which moves a partition's
low watermark exactly as retention does. Sinks are record_echo: one row per (topic, partition,
offset), so "every record that still exists is in the sink exactly once" is checked per record.
"""

from __future__ import annotations

from lifecycle_helpers import cli, cli_json, delete_records_before, sink_records
from offsets import high_watermarks, kafka_offsets, stored_offsets

from drainer.kafka.producer import OutRecord
from drainer.offset_map import decode_offset_map
from drainer.settings import load_settings
from spark_jobs import drain_job
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.stack import produce_records

POISON_ECHO = {
    "mode": "record",
    "handler": "tests.processors:poison_echo",
    "output_schema": RECORD_ECHO_SCHEMA,
    "ordering": "unordered",
    "max_attempts": 100,  # the poison record stays not done: done records above it go to the map
}


def _records(count: int, poison_at: set[int] = frozenset()) -> list[OutRecord]:
    return [
        OutRecord(value=b"poison" if i in poison_at else f"v{i}".encode(), key=f"k{i}".encode())
        for i in range(count)
    ]


def test_retention_below_the_committed_offset_skips_records_it_deleted_and_replays_nothing(
    make_drain, spark
):
    drain = make_drain(levels=1, partitions=2, budget=120, **POISON_ECHO)
    topic = drain.level_topic(0)
    produce_records(drain, _records(100, poison_at={35}), level=0, partition=0)
    produce_records(drain, _records(100), level=0, partition=1)

    first = drain_job.run(
        drain.name, trigger="test", settings=load_settings()
    )  # 60 + 60: offset 35 of partition 0 fails
    assert first.levels[0].failed == 1
    committed, offset_map = stored_offsets(drain)[(topic, 0)]
    assert committed == 35 and decode_offset_map(35, offset_map) == set(range(36, 60))

    # retention deletes 0..44 of partition 0: the committed offset 35 is gone, done 45..59 are not
    delete_records_before(drain, 0, 0, 45)
    status = cli_json("status", drain.name, "--json")
    pending = status["levels"][0]["partitions"][0]["pending_retention_loss"]
    assert pending == {"first": 35, "end": 45, "records": 1}  # 36..44 were done, 35 was not

    proc = cli("run", drain.name, "--json")  # a later run: exit 0, no wedge
    assert proc.returncode == 0, proc.stderr[-4000:]
    log = " ".join(proc.stderr.split())  # rich wraps log lines
    assert f"{topic}[0]: offsets 35..44 were deleted by Kafka retention" in log

    assert stored_offsets(drain)[(topic, 0)] == (100, "")
    assert stored_offsets(drain)[(topic, 1)] == (100, "")
    sink = sink_records(drain)
    still_there = {(topic, 0, o) for o in range(45, 100)} | {(topic, 1, o) for o in range(100)}
    assert still_there <= set(sink)
    assert max(sink.values()) == 1, "a record was published twice"
    assert (topic, 0, 35) not in sink  # it failed, then Kafka deleted it: lost, never published
    # nothing replayed: 45..59 were done before retention struck and were not read again
    assert set(sink) == still_there | {(topic, 0, o) for o in range(0, 35)} | {
        (topic, 0, o) for o in range(36, 45)
    }

    status = cli_json("status", drain.name, "--json")
    assert status["lost_to_retention"] == 1
    assert status["levels"][0]["lost_to_retention"] == 1
    [loss] = status["retention_losses"]
    assert (loss["topic"], loss["partition"], loss["first_offset"], loss["end_offset"]) == (
        topic,
        0,
        35,
        45,
    )
    assert loss["kind"] == "committed" and loss["records"] == 1
    runs_by_id = {r["id"]: r for r in status["runs"]}
    assert runs_by_id[loss["run_id"]]["lost_to_retention"] == 1
    assert status["levels"][0]["backlog"] == 0
    assert kafka_offsets(drain) == {k: (v, "") for k, v in high_watermarks(drain).items()}


def test_retention_inside_an_open_plan_reads_what_still_exists_and_commits(make_drain, spark):
    drain = make_drain(levels=1, partitions=2, budget=1000, **POISON_ECHO)
    topic = drain.level_topic(0)
    for partition in (0, 1):
        produce_records(drain, _records(100), level=0, partition=partition)

    crashed = cli("run", drain.name, fault="after_plan")  # the plan [0, 100) x 2 stays open
    assert crashed.returncode == 86, crashed.stderr[-3000:]
    delete_records_before(drain, 0, 0, 40)  # before the plan is resumed

    proc = cli("run", drain.name, "--json")
    assert proc.returncode == 0, proc.stderr[-4000:]  # no failOnDataLoss failure
    assert f"{topic}[0]: offsets 0..39 of the planned range" in " ".join(proc.stderr.split())
    result = cli_json("status", drain.name, "--json")
    [run] = [r for r in result["runs"] if r["status"] == "committed"]
    assert run["drained"] == 160 and run["lost_to_retention"] == 40

    sink = sink_records(drain)
    assert set(sink) == {(topic, 0, o) for o in range(40, 100)} | {
        (topic, 1, o) for o in range(100)
    }
    assert max(sink.values()) == 1
    assert stored_offsets(drain) == {(topic, 0): (100, ""), (topic, 1): (100, "")}
    assert result["lost_to_retention"] == 40
    [loss] = result["retention_losses"]
    assert (loss["kind"], loss["partition"], loss["first_offset"], loss["end_offset"]) == (
        "plan",
        0,
        0,
        40,
    )
    assert result["levels"][0]["backlog"] == 0


def test_a_resumed_plan_whose_ranges_retention_deleted_publishes_nothing_staged_before(
    make_drain, spark
):
    """Before: with nothing left to read the Spark job did not run, so the crashed attempt's
    stage was never emptied and the commit published its 100 rows, next to 100 records counted
    as lost to retention."""
    drain = make_drain(levels=1, partitions=1, budget=1000, **POISON_ECHO)
    topic = drain.level_topic(0)
    produce_records(drain, _records(100), level=0, partition=0)
    crashed = cli("run", drain.name, fault="after_staging")  # staged, not committed
    assert crashed.returncode == 86, crashed.stderr[-3000:]
    delete_records_before(drain, 0, 0, 100)  # retention takes every planned record

    proc = cli("run", drain.name, "--json")
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = cli_json("status", drain.name, "--json")
    [run] = [r for r in result["runs"] if r["status"] == "committed"]
    assert run["drained"] == 0 and run["lost_to_retention"] == 100
    assert sink_records(drain) == {}
    assert stored_offsets(drain) == {(topic, 0): (100, "")}
