"""Issue 4 and issue 52 acceptance on the real stack: `drainer dlq list|show|retry`.

Dead letters are listed from Postgres; a retry marks them requested and the drain's next run
processes them again, from Postgres, once the handler is fixed (here: the drain's handler is
switched from poison_echo to record_echo in its YAML) or with a fixed value (`--value-from`).
Nothing goes back to Kafka: other drains of the same topics see nothing new.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
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

    # request one by id, then the rest; nothing is ever requested twice
    one = min(d["id"] for d in listed)
    assert (
        "requested a retry of 1 dead letters"
        in _cli("dlq", "retry", drain.name, "--ids", str(one)).stdout
    )
    assert [d["id"] for d in _listed(drain.name) if d["retry_requested_at"]] == [one]
    # an id already requested, or not a dead letter of the drain, is named; nothing is
    # requested (before: `re-produced 0 dead letters`, exit 0)
    again = subprocess.run(
        [str(DRAINER), "dlq", "retry", drain.name, "--ids", str(one), "999999999"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert again.returncode == 2, again.stderr
    assert f"{one} is already requested" in again.stderr, again.stderr
    assert f"999999999 is not a dead letter of drain '{drain.name}'" in again.stderr
    assert "requested a retry of 4 dead letters" in _cli("dlq", "retry", drain.name).stdout
    assert "requested a retry of 0 dead letters" in _cli("dlq", "retry", drain.name).stdout
    requested = _listed(drain.name)
    assert len(requested) == 5 and all(d["retry_requested_at"] for d in requested)
    assert not any(d["retried_at"] for d in requested)
    marks = level_watermarks(drain, range(3))
    assert sum(wm.high for wm in marks.values()) == 160  # nothing was produced to Kafka

    # the next run retries exactly the requested records (a run of their own), now
    # successfully, then plans the levels as usual: nothing new to drain
    second = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert second.finished is not None
    assert (second.finished.retried, second.finished.dead_again) == (5, 0)
    assert second.drained == 0
    assert sum(lv.dead_lettered for lv in second.levels) == 0
    assert _listed(drain.name) == []
    retried = _listed(drain.name, "--all")
    assert len(retried) == 5 and all(d["retried_at"] for d in retried)
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
    retried_rows = [r for r in rows if r.run == second.finished.run_id]
    # as they were read: the handler saw each retried record at its own offset
    assert sorted(
        (r.topic, r.partition, r.offset, r.key, r.value_size) for r in retried_rows
    ) == sorted(
        (topic, partition, offset, key.decode(), len(value))
        for (topic, partition, offset), (key, value) in originals.items()
    )
    assert len({(r.topic, r.partition, r.offset) for r in rows}) == 160  # each offset once
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


def test_binary_headers_survive_dead_letter_and_retry_and_one_of_two_concurrent_retries(
    make_drain, spark
):
    """Repeated keys, 0x00 and non-UTF-8 bytes reach the handler byte for byte when retried
    (it fails again: the dead letter stores what it got); two retries at once request the
    dead letter once; nothing is produced to Kafka."""
    import threading
    import time

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

    def stored() -> tuple:
        with get_engine().connect() as conn:
            return conn.execute(
                text(
                    "SELECT id, key, value, headers, attempts, retry_requested_at "
                    "FROM dead_letters WHERE drain = :d"
                ),
                {"d": drain.name},
            ).one()

    assert decode_headers(stored().headers) == headers

    # a race test must see its race: tried until both requests were in flight at once (each
    # round starts from an unrequested dead letter), and every round requests it once
    def one_round() -> bool:
        """Two requests at once; True when both were in flight together."""
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
        return max(b for b, _ in spans) < min(e for _, e in spans)

    overlapped = False
    for _ in range(30):
        if one_round():
            overlapped = True
            break
        with get_engine().begin() as conn:
            conn.execute(
                text("UPDATE dead_letters SET retry_requested_at = NULL WHERE drain = :d"),
                {"d": drain.name},
            )
    assert overlapped, "the two requests never ran at once"
    assert stored().retry_requested_at is not None
    marks = level_watermarks(drain, [1])
    assert marks[(1, 0)].high == 1  # nothing produced: the original alone

    # retried as it was read: the handler fails on it again, and the dead letter now holds
    # what the handler got, byte for byte
    second = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert second.finished is not None
    assert (second.finished.retried, second.finished.dead_again) == (0, 1)
    again = stored()
    assert (bytes(again.key), bytes(again.value)) == (key, value)
    assert decode_headers(again.headers) == headers
    assert again.attempts == 2 and again.retry_requested_at is None
    assert _listed(drain.name)[0]["error"].startswith("ValueError: poison record at ")


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


def _sink_rows(drain) -> list:
    with get_engine().connect() as conn:
        return conn.execute(
            text(
                f'SELECT topic, partition, "offset", value_size, _drainer_run_id AS run '
                f'FROM "{drain.sink.table}" ORDER BY topic, partition, "offset"'
            )
        ).all()


def test_a_retry_goes_to_its_own_drain_only_once_and_with_the_fixed_value(
    make_drain, spark, tmp_path
):
    """Issue 52: `dlq retry` on topics read by two drains: the other drain sees nothing new.

    Before: the retry re-produced the record to the shared level topic, so drain B drained a
    copy of drain A's dead letter (and a crash between Kafka's ack and the Postgres update
    produced it twice)."""
    a = make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        max_attempts=1,
        ordering="unordered",  # the records after the poison one are not held back
        levels=2,
        partitions=1,
    )
    config_a = os.environ["DRAINER_CONFIG"]
    b = make_drain(
        topic=a.topic,
        mode="record",
        handler="spark_jobs.examples:record_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        levels=2,
        partitions=1,
    )
    values = [b"poison 3" if i == 3 else b"fine %d" % i for i in range(8)]
    produce_records(a, [OutRecord(value=v, key=b"k") for v in values], level=1)
    first_a = drain_job.run(a, trigger="test", settings=load_settings())
    first_b = drain_job.run(b, trigger="test", settings=load_settings())
    assert (first_a.drained, first_b.drained) == (8, 8)
    [dead] = _listed_in(config_a, a.name)
    assert dead["offset"] == 3

    fixed = tmp_path / "fixed.bin"
    fixed.write_bytes(b"fixed value, much longer than the original")
    out = _cli_in(
        config_a, "dlq", "retry", a.name, "--ids", str(dead["id"]), "--value-from", str(fixed)
    )
    assert "requested a retry of 1 dead letters" in out.stdout

    # drain B: nothing new (before: the copy, at offset 8)
    second_b = drain_job.run(b, trigger="test", settings=load_settings())
    assert second_b.drained == 0 and second_b.finished is None
    assert len(_sink_rows(b)) == 8
    assert level_watermarks(a, [1])[(1, 0)].high == 8

    # drain A: the fixed record once, at its own offset, with the new value
    second_a = drain_job.run(a, trigger="test", settings=load_settings())
    assert second_a.finished is not None
    assert (second_a.finished.retried, second_a.finished.dead_again) == (1, 0)
    assert second_a.drained == 0
    rows = _sink_rows(a)
    assert [(r.offset, r.run) for r in rows if r.offset == 3] == [(3, second_a.finished.run_id)]
    assert [r.value_size for r in rows if r.offset == 3] == [len(fixed.read_bytes())]
    assert len(rows) == 8 and len({r.offset for r in rows}) == 8
    [after] = _listed_in(config_a, a.name, "--all")
    assert after["retried_at"] is not None
    assert _listed_in(config_a, a.name) == []
    # and again: nothing is retried twice
    assert drain_job.run(a, trigger="test", settings=load_settings()).finished is None
    assert len(_sink_rows(a)) == 8
    # a run with no levels among the drain's runs: status still reads them
    from drainer.observe.status import drain_status

    runs = {r["id"]: r for r in drain_status(a, load_settings())["runs"]}
    assert runs[second_a.finished.run_id]["status"] == "committed"


def _cli_in(config: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "250", "DRAINER_CONFIG": config}
    proc = subprocess.run(
        [str(DRAINER), *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _listed_in(config: str, drain_name: str, *flags: str) -> list[dict]:
    return json.loads(_cli_in(config, "dlq", "list", drain_name, "--json", *flags).stdout)


@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_a_retry_crashed_after_its_table_commit_lands_once_when_resumed(make_drain, lakehouse, fmt):
    """Exactly once for a retried dead letter: the retry run commits its table, is killed
    before Postgres commits, and the resumed run finds that commit and writes nothing again."""
    from lifecycle_helpers import cli
    from test_lakehouse import sink_of, table_offsets, table_run_ids

    from drainer import faults
    from drainer.lifecycle.dlq import retry_dead_letters

    drain = make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        ordering="unordered",
        max_attempts=1,
        levels=1,
        partitions=1,
        sink=sink_of(fmt),
    )
    topic = drain.level_topic(0)
    values = [b"poison 5" if i == 5 else b"fine" for i in range(10)]
    produce_records(drain, [OutRecord(value=v, key=b"k") for v in values], level=0)
    first = drain_job.run(drain, trigger="test", settings=load_settings())
    assert sum(lv.dead_lettered for lv in first.levels) == 1
    [dead] = _listed(drain.name)
    assert retry_dead_letters(drain, load_settings(), ids=[dead["id"]], value=b"fixed") == 1

    crashed = cli("run", drain.name, fault="after_table_commit")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    with get_engine().connect() as conn:
        retry_run = conn.scalar(
            text("SELECT retry_run_id FROM dead_letters WHERE id = :i"), {"i": dead["id"]}
        )
    assert table_run_ids(drain) == [first.run_id, retry_run]  # the table holds the retry
    assert _listed(drain.name)[0]["retried_at"] is None  # Postgres does not, yet

    proc = cli("run", drain.name, "--json")
    assert proc.returncode == 0, proc.stderr[-4000:]
    resumed = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert resumed["finished"]["run_id"] == retry_run
    assert (resumed["finished"]["retried"], resumed["finished"]["dead_again"]) == (1, 0)
    assert table_run_ids(drain) == [first.run_id, retry_run]  # not written a second time
    assert table_offsets(drain) == Counter({(topic, 0, o): 1 for o in range(10)})
    assert _listed(drain.name) == []
    [after] = _listed(drain.name, "--all")
    assert after["retried_at"] is not None


def test_abandoning_a_retry_run_that_cannot_succeed_cancels_its_requests(make_drain, spark):
    """A retry run that fails as a whole blocks the drain like any open plan; `plan abandon`
    ends it and the dead letters stay dead letters, not requested, so the next run plans the
    levels as usual."""
    from drainer.errors import RunFailed
    from drainer.lifecycle.dlq import retry_dead_letters
    from drainer.lifecycle.run import drain_once

    drain = make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        max_attempts=1,
        partitions=1,
    )
    produce_records(drain, [OutRecord(value=b"poison", key=b"k")], level=0)
    drain_job.run(drain, trigger="test", settings=load_settings())
    [dead] = _listed(drain.name)
    assert retry_dead_letters(drain, load_settings(), ids=[dead["id"]], value=b"still poison") == 1
    planned = " ".join(_cli("plan", drain.name).stdout.split())
    assert "1 dead letters wait for their retry" in planned, planned

    def broken(ctx):
        assert ctx.run.retries == 1 and ctx.run.ranges == [] and ctx.run.levels == []
        raise RuntimeError("the processor cannot run at all")

    with pytest.raises(RunFailed, match="cannot run at all"):
        drain_once(drain, broken, trigger="test", settings=load_settings())
    shown = " ".join(_cli("plan", drain.name).stdout.split())
    assert "resumes it with these same 1 dead letters (a retry)" in shown, shown
    out = _cli("plan", "abandon", drain.name, "--reason", "the handler must be fixed first")
    assert "its retry of 1 dead letters is cancelled" in " ".join(out.stdout.split())
    [after] = _listed(drain.name)
    assert after["retry_requested_at"] is None and after["retried_at"] is None
    assert drain_job.run(drain, trigger="test", settings=load_settings()).finished is None


def test_a_retry_crashed_after_its_kafka_transaction_lands_once_when_resumed(make_drain, spark):
    """The Kafka sink's side: the retry run's transaction commits, the process is killed
    before Postgres commits, and the resumed run finds the run's marker: the retried record is
    in the output topic once, read_committed."""
    from kafka_output import output_topic, sources
    from lifecycle_helpers import cli

    from drainer import faults
    from drainer.lifecycle.dlq import retry_dead_letters

    with output_topic() as out:
        drain = make_drain(
            mode="record",
            handler="tests.processors:kafka_poison_echo",
            output_schema="key binary, value binary",
            ordering="unordered",
            max_attempts=1,
            levels=1,
            partitions=1,
            sink={"type": "kafka", "topic": out},
        )
        topic = drain.level_topic(0)
        values = [b"poison 5" if i == 5 else b"fine" for i in range(10)]
        produce_records(drain, [OutRecord(value=v, key=b"k") for v in values], level=0)
        drain_job.run(drain, trigger="test", settings=load_settings())
        assert f"{topic}/0/5" not in sources(out)
        [dead] = _listed(drain.name)
        assert retry_dead_letters(drain, load_settings(), ids=[dead["id"]], value=b"fixed") == 1

        crashed = cli("run", drain.name, fault="after_table_commit")
        assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
        assert sources(out)[f"{topic}/0/5"] == 1  # Kafka holds the retry, Postgres not yet
        assert _listed(drain.name)[0]["retried_at"] is None

        proc = cli("run", drain.name, "--json")
        assert proc.returncode == 0, proc.stderr[-4000:]
        resumed = json.loads(proc.stdout[proc.stdout.index("{") :])
        assert (resumed["finished"]["retried"], resumed["finished"]["dead_again"]) == (1, 0)
        assert sources(out) == Counter({f"{topic}/0/{o}": 1 for o in range(10)})
        assert _listed(drain.name) == []


def test_a_retry_crashed_after_staging_in_postgres_lands_once_when_resumed(make_drain, spark):
    """The Postgres sink's side: the retry run staged its rows and was killed before the
    commit; the resumed run stages them again and publishes them once."""
    from lifecycle_helpers import cli

    from drainer import faults
    from drainer.lifecycle.dlq import retry_dead_letters

    drain = make_drain(
        mode="record",
        handler="tests.processors:poison_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        ordering="unordered",
        max_attempts=1,
        levels=1,
        partitions=1,
    )
    values = [b"poison 2" if i == 2 else b"fine" for i in range(6)]
    produce_records(drain, [OutRecord(value=v, key=b"k") for v in values], level=0)
    drain_job.run(drain, trigger="test", settings=load_settings())
    [dead] = _listed(drain.name)
    assert retry_dead_letters(drain, load_settings(), ids=[dead["id"]], value=b"fixed") == 1

    crashed = cli("run", drain.name, fault="after_staging")
    assert crashed.returncode == faults.EXIT_CODE, crashed.stderr[-3000:]
    assert [r.offset for r in _sink_rows(drain)] == [0, 1, 3, 4, 5]  # staged, not published

    resumed = drain_job.run(drain, trigger="test", settings=load_settings())
    assert resumed.finished is not None and resumed.finished.resumed
    assert (resumed.finished.retried, resumed.finished.dead_again) == (1, 0)
    assert [r.offset for r in _sink_rows(drain)] == list(range(6))
    assert _listed(drain.name) == []
