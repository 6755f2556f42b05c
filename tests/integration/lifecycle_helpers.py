"""Helpers of the run-lifecycle tests: the CLI as a process, Kafka retention and topic recreation
made to happen on purpose, and the record_echo sink read back record by record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from sqlalchemy import text

from drainer.config import DrainConfig
from drainer.kafka.session import KafkaSession
from drainer.settings import load_settings
from tests.support.stack import get_engine

CLI = [sys.executable, "-m", "spark_jobs.cli"]


def cli(*args: str, fault: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`drainer ...` as its own process, optionally with an injected crash point."""
    env = {k: v for k, v in os.environ.items() if k != "DRAINER_FAULT"}
    if fault:
        env["DRAINER_FAULT"] = fault
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout)


def cli_json(*args: str) -> dict:
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout[proc.stdout.index("{") :])


def delete_records_before(drain: DrainConfig, level: int, partition: int, offset: int) -> None:
    """What retention does, deterministically: Kafka deletes every record below `offset`."""
    with KafkaSession(drain, load_settings()) as kafka:
        futures = kafka.admin.delete_records(
            [TopicPartition(drain.level_topic(level), partition, offset)]
        )
        for future in futures.values():
            assert future.result(timeout=30).low_watermark == offset


def recreate_topic(drain: DrainConfig, level: int) -> None:
    """Delete a level topic and create it again under the same name (a new topic id)."""
    with KafkaSession(drain, load_settings()) as kafka:
        client = kafka.admin
        topic = drain.level_topic(level)
        client.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
        deadline = time.monotonic() + 60
        while True:
            new = NewTopic(topic, num_partitions=drain.partitions, replication_factor=1)
            try:
                client.create_topics([new], operation_timeout=30)[topic].result(timeout=60)
                return
            except KafkaException as err:
                code = err.args[0].code()
                retryable = code in (
                    KafkaError.TOPIC_ALREADY_EXISTS,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                )
                if not retryable or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)  # the deletion is still being applied


def published_rows(drain: DrainConfig) -> int:
    """Rows in the sink's target table (0 while it does not exist yet)."""
    with get_engine().connect() as conn:
        if conn.scalar(text("SELECT to_regclass(:t)"), {"t": drain.sink.table}) is None:
            return 0
        return conn.scalar(text(f'SELECT count(*) FROM "{drain.sink.table}"'))


def sink_records(drain: DrainConfig) -> Counter:
    """(topic, partition, offset) -> sink rows of the record (record_echo, one_row_per_record)."""
    with get_engine().connect() as conn:
        if conn.scalar(text("SELECT to_regclass(:t)"), {"t": drain.sink.table}) is None:
            return Counter()
        rows = conn.execute(
            text(f'SELECT topic, partition, "offset" FROM "{drain.sink.table}"')
        ).all()
    return Counter((r.topic, r.partition, r.offset) for r in rows)


def assert_each_record_once(
    drain: DrainConfig,
    ends: dict[tuple[str, int], int] | None = None,
    records: set[tuple[str, int, int]] | None = None,
) -> None:
    """Exactly once, record by record: every (topic, partition, offset) below `ends` (default:
    the committed offsets) is in the sink once, and nothing else is (one-row-per-record sinks).

    `records` replaces "every offset below the ends" where offsets are not all records
    (transaction markers, aborted transactions): exactly those are expected.
    """
    from offsets import stored_offsets

    seen = sink_records(drain)
    if records is not None:
        expected = set(records)
    else:
        if ends is None:
            ends = {key: committed for key, (committed, _) in stored_offsets(drain).items()}
        expected = {(t, p, o) for (t, p), end in ends.items() for o in range(end)}
    twice = {k: n for k, n in seen.items() if n > 1}
    assert not twice, f"{len(twice)} records in the sink more than once, e.g. {list(twice)[:5]}"
    missing = expected - set(seen)
    assert not missing, f"{len(missing)} records missing from the sink, e.g. {sorted(missing)[:5]}"
    extra = set(seen) - expected
    assert not extra, f"{len(extra)} records in the sink beyond the ends, e.g. {sorted(extra)[:5]}"


def sink_keys(drain: DrainConfig) -> Counter:
    with get_engine().connect() as conn:
        rows = conn.execute(text(f'SELECT key FROM "{drain.sink.table}"')).all()
    return Counter(r.key for r in rows)
