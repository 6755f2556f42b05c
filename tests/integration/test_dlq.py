"""Issue 4 acceptance on the real stack: `drainer dlq list` and `drainer dlq retry`.

Dead letters are listed from Postgres; a retry re-produces them, unchanged, to their level
topic and marks them retried, so the next run drains them as new records once the handler is
fixed (here: the drain's handler is switched from poison_echo to record_echo in its YAML).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from offsets import level_watermarks
from sqlalchemy import text

from drainer.kafka.producer import OutRecord
from drainer.settings import load_settings
from spark_jobs import drain_job
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.stack import get_engine, produce_records

DRAINER = Path(sys.executable).with_name("drainer")
# level -> (partition, offset) of poison records among 40 records per partition
POISON = {2: {(0, 3), (1, 17), (1, 39)}, 0: {(0, 0), (1, 25)}}


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250"}  # a wide table: Rich wraps at 80 without a terminal
    proc = subprocess.run(
        [str(DRAINER), *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _listed(drain_name: str, *flags: str) -> list[dict]:
    return json.loads(_cli("dlq", "list", drain_name, "--json", *flags).stdout)


def test_dlq_list_retry_and_drain_again(make_drain, spark):
    drain = make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        ordering="unordered",
        max_attempts=1,
    )
    originals = {}
    for level, poison in POISON.items():
        for partition in range(2):
            records = []
            for offset in range(40):
                bad = (partition, offset) in poison
                key = f"key-{level}-{partition}-{offset % 7}".encode()
                value = (b"poison " if bad else b"fine ") + f"{level}/{partition}/{offset}".encode()
                records.append(OutRecord(value=value, key=key, headers=[("origin", b"test")]))
                if bad:
                    originals[(drain.level_topic(level), partition, offset)] = (key, value)
            produce_records(drain, records, level=level, partition=partition)
    first = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert first.drained == 160
    assert sum(lv.dead_lettered for lv in first.levels) == len(originals) == 5
    with get_engine().connect() as conn:
        stored = conn.execute(
            text('SELECT topic, partition, "offset", headers FROM dead_letters WHERE drain = :d'),
            {"d": drain.name},
        ).all()
    assert {(r.topic, r.partition, r.offset) for r in stored} == set(originals)
    assert all(r.headers == [["origin", "dGVzdA=="]] for r in stored)  # kept for the retry

    # list: every dead letter with where it came from, its key, error and attempts
    listed = _listed(drain.name)
    assert {(d["topic"], d["partition"], d["offset"]) for d in listed} == set(originals)
    for d in listed:
        key, _ = originals[(d["topic"], d["partition"], d["offset"])]
        assert d["key"] == key.decode()
        assert d["level"] == int(d["topic"].rsplit("-", 1)[1])
        assert d["error"].startswith("ValueError: poison record at ")
        assert f"{d['topic']}[{d['partition']}]@{d['offset']}" in d["error"]
        assert d["attempts"] == 1 and d["retried_at"] is None
    table = " ".join(_cli("dlq", "list", drain.name).stdout.split())
    assert f"dead letters of {drain.name}" in table and "ValueError: poison" in table

    # the handler is fixed: switch the drain to record_echo in its YAML
    config = Path(os.environ["DRAINER_CONFIG"])
    body = yaml.safe_load(config.read_text())
    body["drains"][drain.name]["handler"] = "spark_jobs.examples:record_echo"
    config.write_text(yaml.safe_dump(body))

    # retry one by id, then the rest; nothing is ever retried twice
    one = min(d["id"] for d in listed)
    assert (
        "re-produced 1 dead letters" in _cli("dlq", "retry", drain.name, "--ids", str(one)).stdout
    )
    assert len(_listed(drain.name)) == 4
    # an id already retried, or not a dead letter of the drain, is named; nothing is sent
    # (before: `re-produced 0 dead letters`, exit 0)
    again = subprocess.run(
        [str(DRAINER), "dlq", "retry", drain.name, "--ids", str(one), "999999999"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert again.returncode == 2, again.stderr
    assert f"{one} is already retried" in again.stderr, again.stderr
    assert f"999999999 is not a dead letter of drain '{drain.name}'" in again.stderr
    assert len(_listed(drain.name)) == 4
    assert "re-produced 4 dead letters" in _cli("dlq", "retry", drain.name).stdout
    assert "re-produced 0 dead letters" in _cli("dlq", "retry", drain.name).stdout
    assert _listed(drain.name) == []
    retried = _listed(drain.name, "--all")
    assert len(retried) == 5 and all(d["retried_at"] for d in retried)
    marks = level_watermarks(drain, range(3))
    assert sum(wm.high for wm in marks.values()) == 165  # 5 records re-produced

    # the next run drains exactly the re-produced records, now successfully
    second = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert second.drained == 5
    assert sum(lv.dead_lettered for lv in second.levels) == 0
    engine = get_engine()
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                f'SELECT topic, partition, "offset", key, value_size, _drainer_run_id AS run '
                f'FROM "{drain.sink.table}"'
            )
        ).all()
        dead = conn.scalar(
            text("SELECT count(*) FROM dead_letters WHERE drain = :d"), {"d": drain.name}
        )
        offsets = conn.execute(
            text("SELECT topic, partition, committed FROM partition_offsets WHERE drain = :d"),
            {"d": drain.name},
        ).all()
    assert len(rows) == 160  # 155 good records, then the 5 retried ones
    retried_rows = [r for r in rows if r.run == second.run_id]
    assert sorted((r.topic, r.key, r.value_size) for r in retried_rows) == sorted(
        (topic, key.decode(), len(value)) for (topic, _, _), (key, value) in originals.items()
    )
    assert not {(r.topic, r.partition, r.offset) for r in rows} & set(originals)
    assert dead == 5  # no new dead letters
    assert {(r.topic, r.partition): r.committed for r in offsets} == {
        (drain.level_topic(lvl), p): wm.high for (lvl, p), wm in marks.items()
    }


def _dlq_messages(drain, count: int) -> list:
    """Up to `count` messages of the drain's DLQ topic, from its start (20 s at most)."""
    from confluent_kafka import Consumer, TopicPartition

    from drainer.kafka.clients import client_config

    group = f"check-{os.urandom(4).hex()}"
    consumer = Consumer(
        client_config(
            drain,
            load_settings().bootstrap_servers,
            **{"group.id": group, "enable.auto.commit": False},
        )
    )
    consumer.assign([TopicPartition(drain.dlq_topic, p, 0) for p in range(drain.partitions)])
    got = []
    for _ in range(40):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message)
        if len(got) == count:
            break
    consumer.close()
    return got


def test_dead_letters_are_published_to_the_dlq_topic(make_drain, spark):
    suffix = os.urandom(4).hex()
    drain = make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        max_attempts=1,
        ordering="unordered",  # both poison records are attempted (and dead-lettered) in one run
        dlq_topic=f"dlq_{suffix}",
        partitions=1,
    )
    values = [b"poison a" if i in (2, 5) else b"fine" for i in range(8)]
    produce_records(drain, [OutRecord(value=v, key=b"k") for v in values], level=1)
    drain_job.run(drain, trigger="test", settings=load_settings())

    got = _dlq_messages(drain, 2)
    headers = [dict(m.headers()) for m in got]
    assert sorted(h["drainer-source"] for h in headers) == [
        f"{drain.level_topic(1)}/0/2".encode(),
        f"{drain.level_topic(1)}/0/5".encode(),
    ]
    assert all(b"ValueError: poison record" in h["drainer-error"] for h in headers)
    assert all(m.value() == b"poison a" for m in got)
    with get_engine().connect() as conn:
        unpublished = conn.scalar(
            text("SELECT count(*) FROM dead_letters WHERE drain = :d AND dlq_published_at IS NULL"),
            {"d": drain.name},
        )
    assert unpublished == 0


def test_binary_headers_survive_dead_letter_and_one_retry_of_two_concurrent(make_drain, spark):
    """Repeated keys, 0x00 and non-UTF-8 bytes come back byte for byte; two retries at once
    produce the dead letter once."""
    import threading
    import time

    from confluent_kafka import Consumer, TopicPartition

    from drainer.kafka.clients import client_config
    from drainer.lifecycle.dlq import retry_dead_letters
    from drainer.processing.headers import decode_headers

    drain = make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        max_attempts=1,
        partitions=1,
    )
    headers = [("a", b"\x00\x01"), ("a", b"\xff"), ("empty", b""), ("none", None)]
    key, value = b"\x00k\xfe", b"poison \x00\xff\xc3"
    produce_records(drain, [OutRecord(value=value, key=key, headers=headers)], level=1)
    first = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert sum(lv.dead_lettered for lv in first.levels) == 1
    with get_engine().connect() as conn:
        stored = conn.scalar(
            text("SELECT headers FROM dead_letters WHERE drain = :d"), {"d": drain.name}
        )
    assert decode_headers(stored) == headers

    start = threading.Barrier(2)
    counts: list[int] = []
    spans: list[tuple[float, float]] = []

    def retry() -> None:
        start.wait()
        began = time.monotonic()
        counts.append(retry_dead_letters(drain, load_settings()))
        spans.append((began, time.monotonic()))

    threads = [threading.Thread(target=retry) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(counts) == [0, 1]
    # the race happened: both retries began before either returned
    assert max(b for b, _ in spans) < min(e for _, e in spans), spans

    topic = drain.level_topic(1)
    consumer = Consumer(
        client_config(
            drain,
            load_settings().bootstrap_servers,
            **{"group.id": f"check-{topic}", "enable.auto.commit": False},
        )
    )
    consumer.assign([TopicPartition(topic, 0, 1)])  # offset 0 is the original
    got = []
    for _ in range(20):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message)
    consumer.close()
    assert len(got) == 1  # produced once by the two retries
    retried = got[0]
    assert (retried.key(), retried.value()) == (key, value)
    assert retried.headers() == headers  # the same list, byte for byte, nothing added


def test_a_record_dead_lettered_again_after_a_rewind_is_published_again(make_drain, spark):
    """Before: the second dead letter of the same record kept the first one's
    dlq_published_at, so the DLQ topic never saw it again."""
    from drainer.lifecycle.rewind import rewind

    suffix = os.urandom(4).hex()
    drain = make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        max_attempts=1,
        dlq_topic=f"dlq_{suffix}",
        partitions=1,
    )
    values = [b"poison b" if i == 3 else b"fine" for i in range(6)]
    produce_records(drain, [OutRecord(value=v, key=b"k") for v in values], level=0)
    drain_job.run(drain, trigger="test", settings=load_settings())
    rewind(
        drain,
        0,
        to_offset=0,
        reason="replay after a fix that did not hold",
        settings=load_settings(),
    )
    drain_job.run(
        drain, trigger="test", settings=load_settings()
    )  # the same record dead-lettered a second time

    got = _dlq_messages(drain, 2)
    sources = [dict(m.headers())["drainer-source"] for m in got]
    assert sources == [f"{drain.level_topic(0)}/0/3".encode()] * 2  # published twice
