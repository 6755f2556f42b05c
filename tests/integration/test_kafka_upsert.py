"""Issue 48, the Kafka sink's part: `write: upsert` passes keys and tombstones through to a
compacted topic, one record per key per run (the newest by `order_by`, the table sinks' own
collapse), on both producers, exactly once as an append (the same transaction and marker)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource
from kafka_output import admin, auto_producer, output_topic, read_output
from test_exactly_once import cli_run

from drainer.settings import load_settings
from spark_jobs import drain_job

pytestmark = pytest.mark.slow

KEYS = 40
LEVELS = 3


def _drain(make_drain, out: str, producer: str):
    sink = {"type": "kafka", "topic": out, "producer": producer, "write": "upsert"}
    sink["order_by"] = ["v"]
    sink["delete_when"] = "get_json_object(cast(value as string), '$.op') = 'd'"
    return make_drain(
        sink=sink,
        levels=LEVELS,
        partitions=2,
        mode="dataframe",
        processor="tests.processors:kafka_versions",
    )


def _produce(drain, records: list[tuple[int, str, dict | None]]) -> None:
    """(level, key, value or None for a tombstone), with confluent-kafka itself: a tombstone is
    a Kafka null value."""
    producer = Producer({"bootstrap.servers": load_settings().bootstrap_servers})
    for level, key, value in records:
        body = None if value is None else json.dumps(value).encode()
        producer.produce(drain.level_topic(level), body, key.encode())
    assert producer.flush(30) == 0


def _versions(seed: int, first_v: int) -> tuple[list[tuple[int, str, dict | None]], dict]:
    """Records of every key in several levels, versions spread so that a level drained first
    often holds a key's newer version; every fifth key ends in a tombstone, some others in a
    version `delete_when` deletes (`op: d`). The model: each key's newest value, None where its
    newest is a delete."""
    records: list[tuple[int, str, dict | None]] = []
    model: dict[str, bytes | None] = {}
    for k in range(KEYS):
        key = f"k{k:03d}"
        n = 2 + (k + seed) % 3
        for i in range(n):
            v = first_v + i
            level = (k + i * 2 + seed) % LEVELS  # versions land in levels out of their order
            value = {"id": key, "v": v}
            deletes = i == n - 1 and k % 7 == 3
            if deletes:
                value["op"] = "d"
            records.append((level, key, value))
            model[key] = None if deletes else json.dumps(value).encode()
        if k % 5 == seed % 5:
            # the tombstone has no `v`: a delete without order values counts as the newest
            records.append(((k + seed) % LEVELS, key, None))
            model[key] = None
    return records, model


def _read(out: str) -> list[tuple[bytes, bytes | None, int]]:
    """Every record of the output read_committed: (key, value, run id), in offset order."""
    return [(r.key, r.value, int(r.run.split(":")[0])) for r in read_output(out)]


@pytest.mark.parametrize("producer", ["server", "driver"])
def test_upserts_reach_a_compacted_topic_one_record_per_key_per_run(make_drain, spark, producer):
    if producer == "server" and auto_producer(spark) != "server":
        pytest.skip("the Connect server was started without the Kafka sink's Java writer")
    with output_topic(partitions=2, **{"cleanup.policy": "compact"}) as out:
        drain = _drain(make_drain, out, producer)
        per_run = []
        for seed in (0, 1):  # two runs: the second's versions are newer than the first's
            records, model = _versions(seed, first_v=seed * 10)
            _produce(drain, records)
            result = drain_job.run(drain.name, trigger="test", settings=load_settings())
            assert result.drained == len(records)
            assert result.table_commit["details"]["producer"] == producer
            per_run.append((result.run_id, model))
        seen = _read(out)
        for run_id, model in per_run:
            mine = [(k.decode(), v) for k, v, run in seen if run == run_id]
            assert len(mine) == KEYS  # one record per key in each run
            assert dict(mine) == model  # the newest value, a tombstone as a null value
            deletes = sum(v is None for v in model.values())
            assert deletes > KEYS // 5  # tombstones and `delete_when` deletes
            assert sum(v is None for _, v in mine) == deletes
        # what compaction keeps (the last record per key) is the last run's model
        last = {k.decode(): v for k, v, _ in seen}
        assert last == per_run[-1][1]
        resource = ConfigResource(ConfigResource.Type.TOPIC, out)
        client = admin()  # kept: a collected client fails its futures
        config = client.describe_configs([resource])[resource].result(30)
        assert config["cleanup.policy"].value == "compact"


def test_upserts_into_a_topic_that_is_not_compacted_fail_in_one_line(make_drain, spark):
    with output_topic(partitions=1) as out:  # the broker's default policy: delete
        drain = _drain(make_drain, out, "auto")
        records, _ = _versions(0, 0)
        _produce(drain, records[:5])
        proc = cli_run(drain)
        assert proc.returncode == 2, proc.stderr[-2000:]
        line = proc.stderr.strip().splitlines()[-1]
        assert f"topic {out}, whose cleanup.policy is delete, not compact" in line
        assert "Traceback" not in proc.stderr
        assert _read(out) == []  # nothing committed


def test_topics_create_makes_an_upsert_sinks_topic_compacted(make_drain):
    out = f"out_{uuid.uuid4().hex[:8]}"
    drain = _drain(make_drain, out, "auto")
    client = admin()  # kept: a collected client fails its futures
    try:
        made = subprocess.run(
            [sys.executable, "-m", "spark_jobs.cli", "topics", "create", drain.name],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert made.returncode == 0, made.stderr
        assert f"{out}" in made.stdout and "created" in made.stdout
        resource = ConfigResource(ConfigResource.Type.TOPIC, out)
        config = client.describe_configs([resource])[resource].result(30)
        assert config["cleanup.policy"].value == "compact"
        # the drain's level topics keep the broker's default: only the output is state
        level = ConfigResource(ConfigResource.Type.TOPIC, drain.level_topic(0))
        assert client.describe_configs([level])[level].result(30)["cleanup.policy"].value == (
            "delete"
        )
    finally:
        client.delete_topics([out], operation_timeout=10)[out].result(30)
