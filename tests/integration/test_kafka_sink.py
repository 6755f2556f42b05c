"""Issue 27 on the real stack: a Kafka topic sink, exactly once for `read_committed` consumers.

Every output record names its source record in the `drainer.source` header, so "exactly once"
is checked by distinct source coordinates, not by counts. Crashes are real `drainer run`
processes that exit 86 at an injected point; the zombie is a real process stopped (SIGSTOP)
with its transaction produced but not committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka_output import (
    admin,
    assert_each_source_once,
    auto_producer,
    delete_topic,
    expected_sources,
    high_watermark,
    output_topic,
    read_output,
    sources,
)
from lifecycle_helpers import cli
from offsets import high_watermarks, stored_offsets
from sqlalchemy import text
from test_exactly_once import (
    DRAINER,
    _lock_holder,
    cli_run,
    drain_until_empty,
    produce_backlog,
    runs_of,
)

from dagster_project.metadata import run_metadata
from drainer import faults
from drainer.errors import ConfigError, FencedOut, KafkaUnavailable
from drainer.kafka.producer import OutRecord
from drainer.observe.status import drain_status
from drainer.settings import load_settings
from drainer.sinks.kafka.protocol import transactional_id
from spark_jobs import drain_job
from tests.support.stack import get_engine, produce_records

pytestmark = pytest.mark.slow

PER_PARTITION = {0: 150, 1: 100, 2: 50}  # 3 levels x 2 partitions: 600 records
BUDGET = 400  # less than the backlog: a crashed plan is followed by a fresh one
MODES = {
    "dataframe": {"mode": "dataframe", "processor": "spark_jobs.examples:kafka_passthrough"},
    "record": {
        "mode": "record",
        "handler": "tests.processors:kafka_echo",
        "output_schema": "key binary, value binary",
        "ordering": "partition",
    },
}


@pytest.mark.parametrize(
    ("mode", "producer"), [("dataframe", "auto"), ("record", "auto"), ("dataframe", "driver")]
)
def test_each_source_record_is_produced_once_and_names_its_run(make_drain, spark, mode, producer):
    with output_topic() as out:
        sink = {"type": "kafka", "topic": out, "producer": producer}
        drain = make_drain(sink=sink, budget=BUDGET, **MODES[mode])
        total = sum(produce_backlog(drain, PER_PARTITION).values())
        results = drain_until_empty(drain)
        assert sum(r.drained for r in results) == total and len(results) == 2
        high = high_watermarks(drain)
        assert_each_source_once(out, high)
        assert stored_offsets(drain) == {k: (end, "") for k, end in high.items()}
        # each record names the run whose transaction produced it
        records = read_output(out)
        by_run = {r.run.split(":")[0] for r in records if r.run}
        assert by_run == {str(r.run_id) for r in results}
        assert all(r.attempt == 1 for r in records)
        # the run's result, `drainer status` and Dagster's metadata name what it produced
        last = results[-1]
        commit = last.table_commit
        assert commit["format"] == "kafka" and commit["location"] == out
        assert commit["details"]["produced"] == {out: last.drained}
        assert commit["details"]["transactional_id"] == transactional_id(drain.name)
        assert commit["details"]["aborted_attempts"] == 0
        assert commit["details"]["producer"] == (
            auto_producer(spark) if producer == "auto" else producer
        )
        report = drain_status(drain, load_settings())
        assert {r["id"]: r["table_commit"] for r in report["runs"]}[last.run_id] == commit
        shown = cli("status", drain.name)
        assert shown.returncode == 0, shown.stderr
        assert "produced per run" in shown.stdout and transactional_id(drain.name) in shown.stdout
        metadata = run_metadata(last)
        assert metadata[f"kafka_produced_{out}"].value == last.drained
        assert metadata["kafka_transactional_id"].value == transactional_id(drain.name)
        assert metadata["kafka_aborted_attempts"].value == 0
        assert metadata["kafka_producer"].value == commit["details"]["producer"]
        # where the sink's part of the Spark job went, each step inside it
        steps = {k for k in last.phases if k.startswith("sink.")}
        if commit["details"]["producer"] == "server":
            server = {"server_open", "server_flush", "server_marker", "server_commit"}
            assert {"write", "lease_check", "commit", "checks", *server} <= {
                k.removeprefix("sink.") for k in steps
            }
        else:
            assert {"sink.checks", "sink.produce"} <= steps
        # the driver's steps follow one another inside the job (the server's are inside them)
        driver = [k for k in steps if not k.startswith("sink.server_")]
        assert sum(last.phases[k] for k in driver) <= last.phases["spark_job"] + 0.001 * len(driver)


def test_a_large_run_of_the_driver_producer_streams_in_parts_each_record_once(
    make_drain, spark, monkeypatch
):
    """A run past `STAGE_RECORDS` is staged and streamed in parts, each its own Spark job (one
    job's results past the server's `spark.driver.maxResultSize` failed 10M-record runs). The
    thresholds are lowered so that this backlog's runs stream in several parts each."""
    from spark_jobs.sinks import kafka as kafka_sink
    from spark_jobs.sinks.kafka import stream

    streams = []
    real_stream = stream._arrow_stream

    def counted(rows):
        streams.append(rows)
        return real_stream(rows)

    monkeypatch.setattr(kafka_sink, "STAGE_RECORDS", 10)
    monkeypatch.setattr(stream, "PART_BYTES", 1)  # every Spark partition a part of its own
    monkeypatch.setattr(stream, "_arrow_stream", counted)
    with output_topic() as out:
        sink = {"type": "kafka", "topic": out, "producer": "driver"}
        drain = make_drain(sink=sink, budget=BUDGET, **MODES["dataframe"])
        total = sum(produce_backlog(drain, PER_PARTITION).values())
        results = drain_until_empty(drain)
        assert sum(r.drained for r in results) == total and len(results) == 2
        assert len(streams) > len(results)  # the parts happened: more streams than runs
        high = high_watermarks(drain)
        assert_each_source_once(out, high)
        assert stored_offsets(drain) == {k: (end, "") for k, end in high.items()}
        assert {r.table_commit["details"]["producer"] for r in results} == {"driver"}
        assert all(r.phases["sink.stage"] > 0 for r in results)  # the stage is its own phase


def test_rows_route_themselves_to_other_topics_and_partitions(make_drain, spark):
    """A processor's `topic` and `partition` columns route each row (Spark's Kafka sink
    schema); a row without them goes to the sink's topic. Only the columns the output has
    cross to the driver: here no key and no source."""
    with output_topic() as out, output_topic() as routed:
        drain = make_drain(
            sink={"type": "kafka", "topic": out},
            mode="dataframe",
            processor="tests.processors:kafka_routed",
        )
        records = [
            OutRecord(value=b"%d" % i, headers=[("route", routed.encode())] if i % 3 else [])
            for i in range(60)
        ]
        produce_records(drain, records, level=0, partition=0)
        result = drain_job.run(drain, settings=load_settings())
        assert result.drained == 60
        to_routed = {r.value for r in records if r.headers}
        assert {r.value for r in read_output(routed)} == to_routed and len(to_routed) == 40
        assert {r.value for r in read_output(out)} == {r.value for r in records} - to_routed
        assert all(r.run is not None and r.source is None for r in read_output(out))
        # partition 0 only: the routed topic's other partitions hold nothing, not even a marker
        assert [high_watermark(routed, p) > 0 for p in range(3)] == [True, False, False]
        produced = result.table_commit["details"]["produced"]
        assert produced == {out: 20, routed: 40}
        # a row's own topic is checked before it is produced: the driver's producer does that
        assert result.table_commit["details"]["producer"] == "driver"


@pytest.mark.parametrize("point", faults.KAFKA_POINTS)
@pytest.mark.parametrize(
    ("mode", "producer"), [("dataframe", "auto"), ("record", "auto"), ("dataframe", "driver")]
)
def test_crash_then_resume_is_exactly_once(make_drain, spark, mode, producer, point):
    if mode == "record" and point in ("after_plan", "after_commit"):
        pytest.skip("the same in both modes: the dataframe case covers it")
    if producer == "driver" and point in ("after_plan", "after_commit"):
        pytest.skip("before and after the sink's part: the server producer's case covers it")
    with output_topic() as out:
        sink = {"type": "kafka", "topic": out, "producer": producer}
        drain = make_drain(sink=sink, budget=BUDGET, **MODES[mode])
        total = sum(produce_backlog(drain, PER_PARTITION).values())
        crashed = cli_run(drain, point)
        assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
        assert f"injected fault at {point}" in crashed.stderr
        (run,) = runs_of(drain)
        committed = sum(sources(out).values())
        if point in ("after_table_commit", "after_commit"):
            assert committed == BUDGET  # the Kafka transaction committed before the crash
        else:  # during_spark: the job had streamed rows, none was produced yet
            assert committed == 0
        if point == "mid_produce":  # the kill landed inside the open transaction
            assert sum(sources(out, "read_uncommitted").values()) >= 100

        results = drain_until_empty(drain)
        first = results[0]
        if point == "after_commit":
            assert not first.resumed and first.run_id != run.id
        else:
            assert first.run_id == run.id and first.drained == BUDGET
        if point == "after_table_commit":  # found the marker: produced nothing again
            assert first.table_commit["details"]["attempt"] == 1
        if point == "mid_produce":  # the killed attempt's transaction was aborted; it says so
            assert first.table_commit["details"]["aborted_attempts"] == 1
            assert run_metadata(first)["kafka_aborted_attempts"].value == 1
        assert sum(r.drained for r in results) + (BUDGET if point == "after_commit" else 0) == (
            total
        )
        assert_each_source_once(out, high_watermarks(drain))


def _stopped(pid: int) -> bool:
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "T"


@pytest.mark.parametrize("producer", ["auto", "driver"])
def test_a_paused_zombie_attempt_never_becomes_visible(make_drain, spark, producer):
    """Attempt A is stopped (SIGSTOP) with its run produced in an open transaction; B takes the
    drain over and commits the run; A is resumed: its transaction is fenced, never visible.
    On the server producer A's transaction is held by the server, which goes on: B's fence
    aborts it there."""
    with output_topic() as out:
        sink = {"type": "kafka", "topic": out, "producer": producer}
        drain = make_drain(sink=sink, **MODES["dataframe"])
        total = sum(produce_backlog(drain, PER_PARTITION).values())
        env = {**os.environ, "DRAINER_FAULT": "pause_after_produce"}
        a = subprocess.Popen(
            [str(DRAINER), "run", drain.name, "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 240
            while not _stopped(a.pid):
                assert a.poll() is None, a.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "attempt A never reached its pause"
                time.sleep(0.2)
            # A's records are on the broker, in its open transaction
            assert sum(sources(out, "read_uncommitted").values()) == total
            assert sum(sources(out).values()) == 0
            # the network drops A's lock connection: B may take the drain over
            with get_engine().connect() as conn:
                holder = _lock_holder(drain)
                assert holder is not None
                assert conn.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": holder})
            b = drain_job.run(drain.name, trigger="test", wait_s=60, settings=load_settings())
            assert b.drained == total and b.attempt == 2
            assert b.table_commit["details"]["aborted_attempts"] == 1
        finally:
            os.kill(a.pid, signal.SIGCONT)
            _, a_err = a.communicate(timeout=120)
        assert a.returncode != 0, "the zombie attempt must not succeed"
        assert "injected pause at after_produce" in a_err
        # it failed because it was fenced (FencedOut: its producer's epoch, or its lease, was
        # taken over), not for some other reason that would also have kept it invisible
        assert a.returncode == FencedOut.exit_code, a_err[-3000:]
        assert "took over" in a_err and "Traceback" not in a_err, a_err[-3000:]
        # read_committed: B's records, each source once; none of A's (attempt 1)
        assert_each_source_once(out, high_watermarks(drain))
        assert {r.attempt for r in read_output(out)} == {2}
        # read_uncommitted: A's aborted records are there, proof the fence landed in its txn
        assert {r.attempt for r in read_output(out, "read_uncommitted")} == {1, 2}
        (run,) = runs_of(drain)
        assert run.status == "committed"


def _nothing_committed(drain, out: str) -> None:
    (run,) = runs_of(drain)
    assert run.status == "failed"
    assert sum(sources(out).values()) == 0
    assert all(offset == 0 for offset, _ in stored_offsets(drain).values())


def test_a_missing_output_topic_is_named_with_the_command_that_creates_it(make_drain, spark):
    drain = make_drain(sink={"type": "kafka", "topic": "no_such_topic_27"}, **MODES["dataframe"])
    produce_backlog(drain, {0: 5, 1: 5, 2: 5})
    with pytest.raises(ConfigError, match="output topic no_such_topic_27 does not exist") as err:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert "drainer topics create" in str(err.value) and "--topic no_such_topic_27" in str(
        err.value
    )
    assert "\n" not in str(err.value)
    (run,) = runs_of(drain)
    assert run.status == "failed"
    assert all(offset == 0 for offset, _ in stored_offsets(drain).values())


def test_an_output_without_value_is_one_line_and_commits_nothing(make_drain, spark):
    with output_topic() as out:
        drain = make_drain(
            sink={"type": "kafka", "topic": out},
            mode="dataframe",
            processor="spark_jobs.examples:one_row_per_record",
        )
        produce_backlog(drain, {0: 5, 1: 5, 2: 5})
        with pytest.raises(ConfigError, match="the output has no `value` column"):
            drain_job.run(drain.name, trigger="test", settings=load_settings())
        _nothing_committed(drain, out)


def test_a_server_producer_that_cannot_open_its_transaction_fails_the_run_and_commits_nothing(
    make_drain, spark
):
    """The server's producer fences and begins its transaction while the write's tasks already
    read: a failed open (here `initTransactions` given 1 ms) must still fail the tasks' first
    sends, and the run, with its one-line error, never hang them or let a record through.
    Without the setting, the next run drains every record once."""
    if auto_producer(spark) != "server":
        pytest.skip("the Connect server has no drainer producer jar (no JDK)")
    with output_topic() as out:
        sink = {"type": "kafka", "topic": out, "producer": "server"}
        drain = make_drain(sink=sink, kafka_java={"max.block.ms": 1}, **MODES["dataframe"])
        total = sum(produce_backlog(drain).values())
        with pytest.raises(KafkaUnavailable, match="transactions could not start") as err:
            drain_job.run(drain, trigger="test", settings=load_settings())
        assert "\n" not in str(err.value) and "Nothing was produced" in str(err.value)
        _nothing_committed(drain, out)
        assert sum(sources(out, "read_uncommitted").values()) == 0  # not one record sent
        again = drain.model_copy(update={"kafka_java": {}})
        assert drain_job.run(again, trigger="test", settings=load_settings()).drained == total
        assert_each_source_once(out, high_watermarks(drain))


def test_producer_server_where_the_server_cannot_is_one_line_and_commits_nothing(make_drain, spark):
    with output_topic() as out, output_topic() as routed:
        drain = make_drain(
            sink={"type": "kafka", "topic": out, "producer": "server"},
            mode="dataframe",
            processor="tests.processors:kafka_routed",
        )
        produce_records(drain, [OutRecord(value=b"1", headers=[("route", routed.encode())])])
        with pytest.raises(ConfigError, match="`producer: server`, but its rows name") as err:
            drain_job.run(drain.name, trigger="test", settings=load_settings())
        assert "producer: auto" in str(err.value) and "\n" not in str(err.value)
        _nothing_committed(drain, out)


@pytest.mark.parametrize("producer", ["auto", "driver"])
@pytest.mark.parametrize(
    ("processor", "says"),
    [
        ("kafka_one_without_value", "has no `value`"),
        ("kafka_one_oversized", "larger than the broker accepts"),
    ],
)
def test_a_bad_output_record_names_its_source_offset_and_commits_nothing(
    make_drain, spark, producer, processor, says
):
    """The record at offset 3 cannot be produced (no value; over the size limit)."""
    with output_topic() as out:
        drain = make_drain(
            sink={"type": "kafka", "topic": out, "producer": producer},
            mode="dataframe",
            processor=f"tests.processors:{processor}",
            levels=1,
            partitions=1,
        )
        produce_backlog(drain, {0: 10})
        with pytest.raises(ConfigError, match=says) as err:
            drain_job.run(drain.name, trigger="test", settings=load_settings())
        assert f"source record {drain.level_topic(0)}/0/3" in str(err.value)
        assert "\n" not in str(err.value)
        _nothing_committed(drain, out)
        # what was produced besides it was aborted with the transaction (read_committed sees
        # none of it, above); the record itself was never produced
        assert f"{drain.level_topic(0)}/0/3" not in sources(out, "read_uncommitted")


def test_a_first_run_on_a_cluster_without_the_marker_topic_creates_it_compacted(make_drain, spark):
    """A first attempt is never asked for an earlier commit, so it must make the marker topic
    itself: on a new cluster the run's marker had nowhere to go (or went into a topic the
    broker auto-created, not compacted)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    from drainer.sinks.kafka.protocol import MARKER_TOPIC

    client = admin()
    if MARKER_TOPIC in client.list_topics(timeout=30).topics:
        delete_topic(client, MARKER_TOPIC)
    with output_topic() as out:
        drain = make_drain(
            sink={"type": "kafka", "topic": out}, budget=BUDGET, **MODES["dataframe"]
        )
        total = sum(produce_backlog(drain, {0: 20, 1: 20, 2: 20}).values())
        result = drain_job.run(drain, trigger="test", settings=load_settings())
        assert result.drained == total
        assert_each_source_once(out, high_watermarks(drain))
    resource = ConfigResource(ResourceType.TOPIC, MARKER_TOPIC)
    config = client.describe_configs([resource])[resource].result(30)
    assert config["cleanup.policy"].value == "compact"


def _dead_letter_sources(topic: str, isolation: str = "read_committed") -> Counter:
    """How often each source record is on the DLQ topic (its `drainer-source` header)."""
    return Counter(r.headers["drainer-source"].decode() for r in read_output(topic, isolation))


@pytest.mark.parametrize(
    ("point", "ordering"),
    [
        # records after a failed one are held back: three runs, each with its dead letters
        (None, "partition"),
        # nothing held back: one run takes the whole backlog, past `mid_produce`'s 100 records
        ("mid_produce", "unordered"),
        ("after_table_commit", "unordered"),
    ],
)
def test_dead_letters_join_the_runs_transaction_exactly_once(make_drain, spark, point, ordering):
    """With the DLQ topic on the sink's cluster, a run's dead letters are produced in its
    transaction: none of a crashed attempt's are visible, none is published twice, and the
    commit records them published (the publish after it sends nothing)."""
    with output_topic() as out, output_topic(partitions=1) as dlq:
        drain = make_drain(
            sink={"type": "kafka", "topic": out},
            mode="record",
            handler="tests.processors:kafka_poison_echo",
            output_schema="key binary, value binary",
            ordering=ordering,
            max_attempts=1,
            dlq_topic=dlq,
            budget=1000,
        )
        poison = {(0, 5), (0, 140), (1, 77)}  # (partition, offset) of level 2's topic
        for partition in range(2):
            records = [
                OutRecord(value=b"poison" if (partition, o) in poison else b"fine %d" % o)
                for o in range(150)
            ]
            produce_records(drain, records, level=2, partition=partition)
        dead = {f"{drain.level_topic(2)}/{p}/{o}" for p, o in poison}
        if point:
            crashed = cli_run(drain, point)
            assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
            assert _dead_letters(drain) == []  # the Postgres commit was not reached
            if point == "mid_produce":  # killed inside the transaction: none of them visible
                assert _dead_letter_sources(dlq) == Counter()

        results = drain_until_empty(drain)
        assert sum(r.drained for r in results) == 300
        assert _dead_letter_sources(dlq) == Counter(dead)  # each once, read_committed
        fine = expected_sources(high_watermarks(drain)) - dead
        assert sources(out) == Counter(fine)
        stored = _dead_letters(drain)
        assert {s for s, _ in stored} == dead and all(published for _, published in stored)
        # each run's commit counts its dead letters apart from its output rows
        for r in results:
            produced = r.table_commit["details"]["produced"]
            assert r.table_commit["rows_added"] == produced.get(out, 0)
            assert not r.warnings  # nothing was left to publish after the commit
        if point != "after_table_commit":  # else the crashed run's commit is not in `results`
            produced = Counter()
            for r in results:
                produced.update(r.table_commit["details"]["produced"])
            assert produced == {out: 297, dlq: 3}


def _dead_letters(drain) -> list[tuple[str, bool]]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                'SELECT topic, partition, "offset", dlq_published_at IS NOT NULL AS published '
                "FROM dead_letters WHERE drain = :d"
            ),
            {"d": drain.name},
        ).all()
    return [(f"{r.topic}/{r.partition}/{r.offset}", r.published) for r in rows]


def test_a_missing_dlq_topic_leaves_the_dead_letters_to_wait_and_says_how_to_create_it(
    make_drain, spark
):
    """The run's transaction does not take them (a missing topic would fail it); the publish
    after the commit names the topic and the command, and the dead letters wait in Postgres."""
    with output_topic() as out:
        drain = make_drain(
            sink={"type": "kafka", "topic": out},
            mode="record",
            handler="tests.processors:kafka_poison_echo",
            output_schema="key binary, value binary",
            ordering="unordered",
            max_attempts=1,
            dlq_topic=f"{out}-dlq",
        )
        client = admin()  # kept: a collected client fails its futures
        delete_topic(client, drain.dlq_topic)  # make_drain created it
        produce_records(
            drain, [OutRecord(value=b"poison"), OutRecord(value=b"fine")], level=0, partition=0
        )
        result = drain_job.run(drain, trigger="test", settings=load_settings())
        assert result.drained == 2
        assert result.table_commit["details"]["produced"] == {out: 1}
        (warning,) = result.warnings
        assert f"dlq_topic {drain.dlq_topic} does not exist" in warning
        assert f"drainer topics create {drain.name}" in warning
        assert _dead_letters(drain) == [(f"{drain.level_topic(0)}/0/0", False)]
