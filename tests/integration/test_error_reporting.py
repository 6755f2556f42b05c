"""Errors without noise, and failures after the commit as warnings, on the real stack."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from drainer.kafka.producer import OutRecord
from drainer.settings import load_settings
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.drains import drain_body
from tests.support.stack import get_engine, produce_records

DRAINER = [sys.executable, "-m", "spark_jobs.cli"]


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*DRAINER, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "250", **env},
    )


def _drains_file(tmp_path: Path, name: str, **overrides) -> Path:
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": {name: drain_body(name, **overrides)}}))
    return path


def test_an_unreachable_broker_is_one_line(tmp_path):
    """How fast it answers is measured by benchmarks/unreachable_broker.py, not asserted."""
    config = _drains_file(tmp_path, "unreachable")
    done = _cli(
        "plan",
        "unreachable",
        KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1",
        DRAINER_CONFIG=str(config),
        COLUMNS="1000",  # one message, unwrapped
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Kafka at 127.0.0.1:1 did not answer" in lines[0] and "Connection refused" in lines[0]


def test_a_java_only_key_for_librdkafka_is_a_config_error(tmp_path):
    config = _drains_file(tmp_path, "javakey", kafka_librdkafka={"sasl.jaas.config": "x"})
    done = _cli("plan", "javakey", DRAINER_CONFIG=str(config))
    assert done.returncode == 2
    assert "kafka_librdkafka.sasl.jaas.config" in done.stderr
    assert "belongs in `kafka_java:`" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_failed_dead_letter_publish_is_a_warning_on_a_committed_run(make_drain, spark):
    drain = make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        max_attempts=1,
        ordering="unordered",  # the good record is not held back behind the poison one
        partitions=1,
        # a DLQ topic that does not exist (the broker does not auto-create): the publish
        # looks it up and says so before producing (a producer would wait ~30 s to give up)
        dlq_topic=f"missing_{os.urandom(4).hex()}",
    )
    from drainer.kafka.session import KafkaSession

    with KafkaSession(
        drain, load_settings()
    ) as kafka:  # make_drain created the DLQ topic too: remove it again
        kafka.admin.delete_topics([drain.dlq_topic], operation_timeout=10)[drain.dlq_topic].result(
            15
        )
    produce_records(drain, [OutRecord(value=b"poison", key=b"k"), OutRecord(value=b"fine")], 1)
    done = _cli("run", drain.name, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["drained"] == 2
    assert len(result["warnings"]) == 1
    assert result["warnings"][0].startswith(f"publishing dead letters to {drain.dlq_topic} failed")
    assert f"`drainer topics create {drain.name}`" in result["warnings"][0]
    with get_engine().connect() as conn:
        status = conn.scalar(text("SELECT status FROM runs WHERE id = :r"), {"r": result["run_id"]})
        unpublished = conn.scalar(
            text("SELECT count(*) FROM dead_letters WHERE drain = :d AND dlq_published_at IS NULL"),
            {"d": drain.name},
        )
    assert status == "committed" and unpublished == 1  # the next run publishes it


@pytest.mark.parametrize(
    ("processor", "error", "user_frame"),
    [
        # raises while building the DataFrame, in the CLI's own process
        ("always_fails", r"RuntimeError: always_fails: this processor has a bug", "always_fails"),
        # its UDF raises in the Spark tasks: the error arrives through Spark Connect (whichever
        # task fails first: a range may be split into several tasks, so any record may be named)
        ("failing_udf", r"ValueError: no amount in b'v[0-4]'", "_parse_amount"),
    ],
)
def test_a_processor_that_raises_is_one_line_ending_with_its_cause(
    make_drain, processor, error, user_frame
):
    """Before: ~30 lines of drainer's and pyspark's stack, exit 1, no word on what happens next;
    then a headline followed by the user's frames, one to six lines more."""
    drain = make_drain(levels=1, partitions=1, processor=f"tests.processors:{processor}")
    produce_records(drain, [OutRecord(value=f"v{i}".encode(), key=b"k") for i in range(5)], 0)
    done = _cli("run", drain.name)
    assert done.returncode == 2, done.stderr[-3000:]
    report = done.stderr[done.stderr.index("drainer: ") :]
    [line] = [line for line in report.splitlines() if line.strip()]
    assert f"processor tests.processors:{processor} failed at " in line, report
    assert f"in {user_frame};" in line and "stays open" in line, report  # the user's frame
    assert f"the next `drainer run {drain.name}` retries it" in line, report
    assert f"`drainer -v run {drain.name}` shows the whole trace" in line, report
    assert re.search(f"{error}$", line), report  # the cause last, whole
    for ours in ("drainer/lifecycle", "spark_jobs/drain_job.py", "spark_jobs/modes.py", "pyspark"):
        assert ours not in done.stderr, report
    with get_engine().connect() as conn:
        status = conn.scalar(
            text("SELECT status FROM runs WHERE drain = :d ORDER BY id DESC LIMIT 1"),
            {"d": drain.name},
        )
    assert status == "failed"  # the plan stays open for the next run

    verbose = _cli("-v", "run", drain.name)  # the full trace, drainer's frames included
    assert verbose.returncode == 2
    assert "Traceback" in verbose.stderr and "drainer/lifecycle/run.py" in verbose.stderr


def test_a_changed_kafka_setting_applies_to_the_next_run_on_the_same_connect_server(
    make_drain, tmp_path
):
    """Spark's pooled consumers serve only the settings they were made with: before the group id
    carried a digest of them, a run after a `kafka_java:` edit (or a rotated password) failed
    every task until the server evicted the old consumers (spark_jobs.kafka_source.spark_group)."""
    drain = make_drain(partitions=1)
    path = tmp_path / f"{drain.name}.yaml"
    for run, kafka_java in enumerate(({}, {"max.poll.records": 1000}, {})):
        doc = yaml.safe_load(path.read_text())
        doc["drains"][drain.name]["kafka_java"] = kafka_java
        path.write_text(yaml.safe_dump(doc))
        produce_records(drain, [OutRecord(value=f"v{run}".encode(), key=b"k")], 0)
        done = _cli("run", drain.name, "--json", DRAINER_CONFIG=str(path))
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["drained"] == 1
