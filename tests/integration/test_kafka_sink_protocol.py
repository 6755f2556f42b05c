"""Issue 47: the Kafka sink speaks one protocol, whichever producer holds the transaction.

Both producers (the Java writer on the local Connect server, `producer: server`, and the
driver's confluent-kafka producer, `producer: driver`) run the same cases on the real broker,
each on a drain of its own with the same records: a normal run, a resumed run that finds its
marker, a fenced zombie, an oversized record and a missing topic. What each case leaves (the
marker's bytes, every output record's headers, the error line) must be equal byte for byte.

What is normalised, and only that, because it must differ between two drains: the drain's name
(and the topics named after it), the output topic's name, the run id, the run's nonce, the
marker's offset on the shared marker topic, and in a commit's details the name of the producer
that made it (`server` or `driver`). Each is replaced by a placeholder, everything else
(field order, counts, bytes, header names and values, words of the error) is compared as is.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka_output import auto_producer, output_topic, read_output
from sqlalchemy import text
from test_exactly_once import DRAINER, _lock_holder, cli_run, produce_backlog, runs_of

from drainer import faults
from drainer.errors import DrainerError
from drainer.settings import load_settings
from drainer.sinks.kafka.protocol import MARKER_TOPIC, marker_partition
from drainer.store import runs
from spark_jobs import drain_job
from tests.support.stack import get_engine

pytestmark = pytest.mark.slow

PRODUCERS = ("server", "driver")
BACKLOG = {0: 6}  # one level, one partition: the same six records for each producer
PASSTHROUGH = {"mode": "dataframe", "processor": "spark_jobs.examples:kafka_passthrough"}


@pytest.fixture
def both(spark):
    """Skips where the shared Connect server has no Java writer (no JDK when it started)."""
    if auto_producer(spark) != "server":
        pytest.skip("the Connect server was started without the Kafka sink's Java writer")


def _drain(make_drain, out: str, producer: str, **extra):
    sink = {"type": "kafka", "topic": out, "producer": producer}
    return make_drain(sink=sink, levels=1, partitions=1, **{**PASSTHROUGH, **extra})


def _normal(value: str, drain, out: str | None = None) -> str:
    """`value` with what must differ between the two drains replaced by placeholders."""
    with get_engine().connect() as conn:
        for run in runs_of(drain):
            value = value.replace(runs.run_nonce(conn, run.id), "NONCE")
            value = value.replace(f'"run":{run.id}', '"run":RUN')
            value = value.replace(f"{run.id}:NONCE", "RUN:NONCE")
            value = value.replace(f"run {run.id} ", "run RUN ")
    if out:
        value = value.replace(out, "OUT")
    return value.replace(drain.level_topic(0), "LEVEL").replace(drain.name, "DRAIN")


def _markers(drain) -> list[bytes]:
    """The drain's markers on the marker topic, read_committed, in order."""
    partition = marker_partition(drain.name)
    consumer = Consumer(
        {
            "bootstrap.servers": load_settings().bootstrap_servers,
            "group.id": f"protocol-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    found = []
    try:
        consumer.assign([TopicPartition(MARKER_TOPIC, partition, 0)])
        while True:
            msg = consumer.poll(30)
            assert msg is not None, "reading the marker topic timed out"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return found
            if msg.key() == drain.name.encode():
                found.append(msg.value())
    finally:
        consumer.close()


def _records(out: str) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """Every output record read_committed: (key, value, headers in order), by source."""
    found = [(r.key, r.value, list(r.header_list)) for r in read_output(out)]
    return sorted(found, key=lambda r: [v for k, v in r[2] if k == "drainer.source"])


def _seen(drain, out: str) -> dict:
    """What a run left on the broker, normalised: its markers and its records' headers."""
    return {
        "markers": [_normal(m.decode(), drain, out) for m in _markers(drain)],
        "records": [
            (key, value, [(k, _normal(v.decode(), drain, out)) for k, v in headers])
            for key, value, headers in _records(out)
        ],
    }


def _each(make_drain, case) -> dict[str, object]:
    results = {}
    for producer in PRODUCERS:
        with output_topic(partitions=1) as out:
            results[producer] = case(make_drain, out, producer)
    return results


def _normal_run(make_drain, out: str, producer: str, caplog) -> dict:
    drain = _drain(make_drain, out, producer)
    produce_backlog(drain, BACKLOG)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        result = drain_job.run(drain.name, trigger="test", settings=load_settings())
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "Kafka transaction committed: 6 records" in logged and "files" not in logged
    assert result.drained == 6 and result.table_commit["details"]["producer"] == producer
    status = subprocess.run(
        [str(DRAINER), "status", drain.name], capture_output=True, text=True, timeout=120
    )
    assert status.returncode == 0, status.stderr
    # the Kafka sink speaks records, topics and its marker: no files anywhere
    assert "files" not in status.stdout and "files" not in str(result.table_commit)
    assert "records" in status.stdout and "marker offset" in status.stdout
    return _seen(drain, out)


def test_a_normal_run_writes_the_same_marker_and_headers_on_both_producers(
    make_drain, both, caplog
):
    seen = _each(make_drain, lambda md, out, producer: _normal_run(md, out, producer, caplog))
    assert seen["server"] == seen["driver"]
    assert len(seen["server"]["markers"]) == 1 and len(seen["server"]["records"]) == 6
    # what was compared: the whole marker, every header (the normalising left the rest)
    (marker,) = seen["server"]["markers"]
    assert marker.startswith('{"attempt":1,"bytes":') and marker.endswith(
        '"drain":"DRAIN","nonce":"NONCE","produced":{"OUT":6},"run":RUN}'
    )
    headers = [h for _, _, h in seen["server"]["records"]]
    assert headers[0] == [("drainer.run", "RUN:NONCE:1"), ("drainer.source", "LEVEL/0/0")]


def _resumed(make_drain, out: str, producer: str) -> dict:
    drain = _drain(make_drain, out, producer)
    produce_backlog(drain, BACKLOG)
    crashed = cli_run(drain, "after_table_commit")  # Kafka committed, Postgres not
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    resumed = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert resumed.attempt == 2 and resumed.drained == 6
    # the commit the crashed attempt put on record: its producer's name must differ
    commit = resumed.table_commit
    assert commit["details"]["producer"] == producer and commit["details"]["attempt"] == 1
    details = {k: v for k, v in commit["details"].items() if k != "producer"}
    found = {k: v for k, v in commit.items() if k != "version"} | {"details": details}
    return {**_seen(drain, out), "found": _normal(str(found), drain, out)}


def test_a_resumed_run_finds_its_marker_alike_on_both_producers(make_drain, both):
    seen = _each(make_drain, _resumed)
    assert seen["server"] == seen["driver"]
    assert len(seen["server"]["markers"]) == 1  # one transaction committed, found, not redone


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _zombie(make_drain, out: str, producer: str) -> dict:
    """A pauses after producing, before its commit; B takes over and commits; A resumes."""
    drain = _drain(make_drain, out, producer)
    produce_backlog(drain, BACKLOG)
    env = {**os.environ, "DRAINER_FAULT": "pause_after_produce"}
    a = subprocess.Popen(
        [str(DRAINER), "run", drain.name],
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
        with get_engine().connect() as conn:  # A's lock connection drops: B may take over
            holder = _lock_holder(drain)
            assert conn.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": holder})
        b = drain_job.run(drain.name, trigger="test", wait_s=60, settings=load_settings())
        assert b.attempt == 2 and b.drained == 6
    finally:
        os.kill(a.pid, signal.SIGCONT)
        _, a_err = a.communicate(timeout=120)
    assert a.returncode != 0, "the zombie attempt must not succeed"
    line = [x for x in a_err.splitlines() if x.strip()][-1]
    return {**_seen(drain, out), "error": _normal(line, drain, out)}


def test_a_fenced_zombie_fails_with_the_same_line_on_both_producers(make_drain, both):
    seen = _each(make_drain, _zombie)
    assert seen["server"] == seen["driver"]
    assert "a newer attempt took over the producer" in seen["server"]["error"]
    # B's records only: A's transaction was fenced, never visible
    assert {dict(h)["drainer.run"] for _, _, h in seen["server"]["records"]} == {"RUN:NONCE:2"}


def _failed(make_drain, out: str, producer: str, topic: str | None = None, **extra) -> str:
    drain = _drain(make_drain, topic or out, producer, **extra)
    produce_backlog(drain, BACKLOG)
    with pytest.raises(DrainerError) as err:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert "\n" not in str(err.value)
    assert _records(out) == [] and _markers(drain) == []  # nothing committed
    return _normal(f"{type(err.value).__name__}: {err.value}", drain, topic or out)


def test_an_oversized_record_is_named_alike_on_both_producers(make_drain, both):
    seen = _each(
        make_drain,
        lambda md, out, producer: _failed(
            md, out, producer, processor="tests.processors:kafka_one_oversized"
        ),
    )
    assert seen["server"] == seen["driver"]
    assert "(from source record LEVEL/0/3)" in str(seen["server"])


def test_a_missing_topic_is_named_alike_on_both_producers(make_drain, both):
    missing = f"no_such_topic_{uuid.uuid4().hex[:8]}"
    seen = _each(make_drain, lambda md, out, producer: _failed(md, out, producer, topic=missing))
    assert seen["server"] == seen["driver"]
    assert "output topic OUT does not exist" in str(seen["server"])


def _tombstones(make_drain, out: str, producer: str) -> dict:
    """An upsert run: three keys in several versions, one ending in a tombstone (a null value
    produced by confluent-kafka itself); one record per key, the tombstone with its key."""
    sink = {"type": "kafka", "topic": out, "producer": producer, "write": "upsert"}
    drain = make_drain(
        sink={**sink, "order_by": ["v"]},
        levels=1,
        partitions=1,
        mode="dataframe",
        processor="tests.processors:kafka_versions",
    )
    kafka = Producer({"bootstrap.servers": load_settings().bootstrap_servers})
    for key, v in (("a", 1), ("b", 1), ("a", 2), ("c", 1), ("b", 2), ("b", None), ("c", 3)):
        value = None if v is None else json.dumps({"id": key, "v": v}).encode()
        kafka.produce(drain.level_topic(0), value, key.encode(), partition=0)
    assert kafka.flush(30) == 0
    result = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert result.drained == 7 and result.table_commit["details"]["producer"] == producer
    return _seen(drain, out)


def test_a_tombstone_passes_through_alike_on_both_producers(make_drain, both):
    seen = {}
    for producer in PRODUCERS:
        with output_topic(partitions=1, **{"cleanup.policy": "compact"}) as out:
            seen[producer] = _tombstones(make_drain, out, producer)
    assert seen["server"] == seen["driver"]
    records = {key: value for key, value, _ in seen["server"]["records"]}
    assert records == {b"a": b'{"id": "a", "v": 2}', b"b": None, b"c": b'{"id": "c", "v": 3}'}
    (marker,) = seen["server"]["markers"]
    assert '"produced":{"OUT":3}' in marker
