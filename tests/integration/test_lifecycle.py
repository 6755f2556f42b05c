"""Issue 8, points 2-4: a way out of a stuck plan, recreated topics, transactional producers."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import yaml
from confluent_kafka import KafkaError, Message, Producer
from lifecycle_helpers import (
    assert_each_record_once,
    cli,
    cli_json,
    recreate_topic,
    sink_keys,
    sink_records,
)
from offsets import high_watermarks, kafka_offsets, states, stored_offsets
from sqlalchemy import text

from drainer.errors import PlanKeepsFailing, ProcessorFailed, RunFailed, TopicRecreated
from drainer.kafka.clients import client_config
from drainer.kafka.producer import OutRecord
from drainer.kafka.session import KafkaSession
from drainer.lifecycle.run import drain_once
from drainer.settings import load_settings
from spark_jobs import drain_job
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.stack import get_engine, produce_records

RECORD_ECHO = {
    "mode": "record",
    "handler": "spark_jobs.examples:record_echo",
    "output_schema": RECORD_ECHO_SCHEMA,
}


def _keyed(prefix: str, count: int) -> list[OutRecord]:
    return [
        OutRecord(value=f"{prefix}{i}".encode(), key=f"{prefix}{i}".encode()) for i in range(count)
    ]


def _set_processor(processor: str) -> None:
    """Deploy a processor fix: rewrite the drain's processor in the drains file."""
    path = os.environ["DRAINER_CONFIG"]
    with open(path) as f:
        body = yaml.safe_load(f)
    for drain in body["drains"].values():
        drain["processor"] = processor
    with open(path, "w") as f:
        yaml.safe_dump(body, f)


def test_a_stuck_plan_is_abandoned_audited_and_the_next_run_drains(make_drain, spark):
    drain = make_drain(
        levels=1, partitions=2, budget=1000, processor="tests.processors:always_fails"
    )
    for partition in (0, 1):
        produce_records(drain, _keyed("r", 50), level=0, partition=partition)

    with pytest.raises(ProcessorFailed, match="always_fails") as first:
        drain_job.run(
            drain.name, trigger="test", settings=load_settings()
        )  # the first attempt: the processor's own error
    assert isinstance(first.value.__cause__, RuntimeError)
    with pytest.raises(PlanKeepsFailing, match="failed 2 attempts"):
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    with pytest.raises(PlanKeepsFailing) as info:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    message = str(info.value)
    assert "failed 3 attempts" in message and f"drainer plan abandon {drain.name}" in message
    assert "always_fails" in message

    status = cli_json("status", drain.name, "--json")
    [stuck] = status["runs"]
    assert (stuck["status"], stuck["attempts"]) == ("failed", 3)

    refused = cli("plan", "abandon", drain.name)  # the reason is required
    assert refused.returncode == 2 and "--reason" in refused.stderr
    done = cli("plan", "abandon", drain.name, "--reason", "processor bug #12, fixed in 1.4")
    assert done.returncode == 0, done.stderr
    again = cli("plan", "abandon", drain.name, "--reason", "twice")
    assert again.returncode == 2 and "no open plan" in again.stderr

    with get_engine().connect() as conn:
        audit = (
            conn.execute(text("SELECT * FROM plan_abandons WHERE drain = :d"), {"d": drain.name})
            .mappings()
            .all()
        )
        status_now = conn.scalar(text("SELECT status FROM runs WHERE id = :r"), {"r": stuck["id"]})
    [row] = audit
    assert row["run_id"] == stuck["id"] and row["attempts"] == 3 and row["status"] == "failed"
    assert row["reason"] == "processor bug #12, fixed in 1.4" and row["requested_by"]
    assert "always_fails" in row["last_error"]
    assert sorted((r["partition"], r["start"], r["end"]) for r in row["ranges"]) == [
        (0, 0, 50),
        (1, 0, 50),
    ]
    assert status_now == "abandoned"
    assert stored_offsets(drain) == {(drain.level_topic(0), p): (0, "") for p in (0, 1)}

    plan = cli_json("plan", drain.name, "--json")  # `drainer plan <drain>` is still the dry run
    assert plan["total_planned"] == 100 and "resumes_run" not in plan

    _set_processor("spark_jobs.examples:time_buckets")
    result = drain_job.run(drain.name, trigger="test", settings=load_settings())  # plans afresh
    assert result.run_id != stuck["id"] and not result.resumed and result.drained == 100
    assert stored_offsets(drain) == {(drain.level_topic(0), p): (50, "") for p in (0, 1)}


def test_a_recreated_topic_stops_the_drain_until_a_rewind_to_earliest(make_drain, spark):
    drain = make_drain(levels=1, partitions=1, budget=1000, **RECORD_ECHO)
    topic = drain.level_topic(0)
    produce_records(drain, _keyed("old", 50), level=0, partition=0)
    assert drain_job.run(drain.name, trigger="test", settings=load_settings()).drained == 50
    with KafkaSession(drain, load_settings()) as kafka:
        old_id = kafka.topic_ids([topic])[topic]

    recreate_topic(drain, 0)
    produce_records(drain, _keyed("new", 20), level=0, partition=0)
    with KafkaSession(drain, load_settings()) as kafka:
        new_id = kafka.topic_ids([topic])[topic]
    assert new_id != old_id

    with pytest.raises(TopicRecreated) as info:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    message = str(info.value)
    assert topic in message and old_id in message and new_id in message
    assert f"drainer rewind {drain.name} --level 0 --to-earliest" in message
    proc = cli("run", drain.name)  # the CLI: one clear line, exit 2, nothing read
    assert proc.returncode == 2 and "deleted and created again" in proc.stderr
    assert sink_keys(drain) == {f"old{i}": 1 for i in range(50)}
    assert stored_offsets(drain)[(topic, 0)] == (50, "")

    rewound = cli("rewind", drain.name, "--level", "0", "--to-earliest", "--reason", "recreated")
    assert rewound.returncode == 0, rewound.stderr
    with get_engine().connect() as conn:
        audit = conn.execute(
            text(
                "SELECT from_offset, to_offset, reason, topic_id FROM offset_rewinds WHERE drain = :d"
            ),
            {"d": drain.name},
        ).all()
    assert [tuple(a) for a in audit] == [(50, 0, "recreated", new_id)]

    result = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert result.drained == 20
    keys = sink_keys(drain)
    assert keys == {**{f"old{i}": 1 for i in range(50)}, **{f"new{i}": 1 for i in range(20)}}
    assert stored_offsets(drain)[(topic, 0)] == (20, "")


def test_finishing_another_plan_checks_its_topics_identity(make_drain, spark):
    """The issue's reproduction: a level-0 plan crashed after planning, the topic was recreated
    with 800 records, a run of level 1 finished the old plan. Before: it read offsets 0..500
    of the new topic as the old plan's, and the sink later held 1,300 level-0 records."""
    drain = make_drain(levels=2, partitions=1, budget=1000, **RECORD_ECHO)
    topic = drain.level_topic(0)
    produce_records(drain, _keyed("old", 500), level=0, partition=0)
    produce_records(drain, _keyed("one", 10), level=1, partition=0)

    def crash(ctx):
        raise RuntimeError("crashed after planning")

    with pytest.raises(RunFailed, match="crashed after planning"):
        drain_once(drain, crash, levels=[0], trigger="test", settings=load_settings())
    recreate_topic(drain, 0)
    produce_records(drain, _keyed("new", 800), level=0, partition=0)

    with pytest.raises(TopicRecreated) as info:
        drain_job.run(drain.name, levels=[1], trigger="test", settings=load_settings())
    assert topic in str(info.value) and f"drainer plan abandon {drain.name}" in str(info.value)
    assert sink_records(drain) == {}  # nothing of the new topic read under the old plan
    assert stored_offsets(drain)[(topic, 0)] == (0, "")


Position = tuple[str, int, int]  # (topic, partition, offset) of one record


class _Delivered:
    """The broker's (topic, partition, offset) of each produced record, from delivery reports."""

    def __init__(self) -> None:
        self.positions: list[Position] = []

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        self.positions.append((msg.topic(), msg.partition(), msg.offset()))

    def take(self) -> set[Position]:
        taken, self.positions = set(self.positions), []
        return taken


def _transactional_backlog(
    drain, transactions: int, per_transaction: int, delivered: _Delivered
) -> tuple[list[bytes], set[Position], set[Position], Producer]:
    """Produce in transactions, aborting every other one; returns the committed values and the
    positions of the committed and of the aborted records."""
    producer = Producer(
        client_config(
            drain,
            load_settings().bootstrap_servers,
            **{"transactional.id": f"{drain.name}-tx", "linger.ms": 5},
        )
    )
    producer.init_transactions(30)
    committed: list[bytes] = []
    kept: set[Position] = set()
    aborted: set[Position] = set()
    for t in range(transactions):
        producer.begin_transaction()
        values = [f"tx{t}-{i}".encode() for i in range(per_transaction)]
        for i, value in enumerate(values):
            producer.produce(
                drain.level_topic(0), value=value, key=value, partition=i % 2, on_delivery=delivered
            )
        producer.flush(30)  # on the broker before the abort: aborted records really exist there
        if t % 2:
            producer.abort_transaction(30)
            aborted |= delivered.take()
        else:
            producer.commit_transaction(30)
            committed += values
            kept |= delivered.take()
    return committed, kept, aborted, producer


def test_a_transactional_producer_drains_exactly_its_committed_records(make_drain, spark):
    """Both modes drain each committed record once, by its (topic, partition, offset): not
    the aborted transactions' records, not the control markers, not the open transaction's
    records until it commits. Fails if a sink row is missing, doubled, or at any other
    offset (an aborted record, a marker's offset, a record read twice across the two runs)."""
    for mode in (RECORD_ECHO, {"processor": "spark_jobs.examples:one_row_per_record"}):
        drain = make_drain(levels=1, partitions=2, budget=10_000, **mode)  # now DRAINER_CONFIG
        delivered = _Delivered()
        committed, kept, aborted, producer = _transactional_backlog(
            drain, transactions=10, per_transaction=20, delivered=delivered
        )
        assert len(committed) == len(kept) == len(aborted) == 100
        # an open transaction: its records lie beyond the last stable offset, not in the backlog
        producer.begin_transaction()
        for i in range(7):
            producer.produce(
                drain.level_topic(0), value=b"open", key=b"open", partition=i % 2,
                on_delivery=delivered,
            )  # fmt: skip
        producer.flush(30)
        late = delivered.take()
        parts = states(drain, [0])
        # the plan ends at the last stable offset: the open transaction's 7 are not backlog yet
        # (backlog counts offsets: before the run it includes aborted records and markers)
        assert sum(p.log_end - p.high for p in parts) == 7
        assert sum(p.backlog for p in parts) == sum(p.high for p in parts) == 220

        first = drain_job.run(drain.name, trigger="test", settings=load_settings())
        assert first.drained == 100, first  # records present, not offsets (no markers, aborts)
        assert_each_record_once(drain, records=kept)  # not one of the open transaction's
        # each partition's count is exact: the first run's total falls short of its offsets
        # (a dataframe-mode run counts again per partition), the next one counts per partition
        kept_in = Counter((t, p) for t, p, _ in kept)
        assert _read_records(first.run_id) == kept_in, _read_records(first.run_id)

        producer.commit_transaction(30)
        second = drain_job.run(drain.name, trigger="test", settings=load_settings())
        assert second.drained == 7
        assert _read_records(second.run_id) == Counter((t, p) for t, p, _ in late)
        parts = states(drain, [0])
        assert sum(p.backlog for p in parts) == 0  # no phantom record after the last marker
        ends = high_watermarks(drain)
        assert {k: v for k, v in stored_offsets(drain).items()} == {
            k: (v, "") for k, v in ends.items()
        }
        assert kafka_offsets(drain) == {k: (v, "") for k, v in ends.items()}
        assert cli_json("status", drain.name, "--json")["levels"][0]["backlog"] == 0

        assert_each_record_once(drain, records=kept | late)
        # the offsets the sink lacks are exactly the aborted records and the control markers:
        # one marker per transaction and partition (10 + the late one, on 2 partitions)
        below_ends = {(t, p, o) for (t, p), end in ends.items() for o in range(end)}
        markers = below_ends - kept - late - aborted
        assert len(markers) == 11 * 2 and not markers & set(sink_records(drain))
        assert not aborted & set(sink_records(drain))
        if mode is RECORD_ECHO:
            expected = {f"tx{t}-{i}": 1 for t in range(0, 10, 2) for i in range(20)}
            assert sink_keys(drain) == {**expected, "open": 7}


def _read_records(run_id: int) -> Counter[tuple[str, int]]:
    """The records a run counted per (topic, partition), as its commit stored them."""
    with get_engine().connect() as conn:
        rows = conn.execute(
            text("SELECT topic, partition, read_records FROM run_ranges WHERE run_id = :r"),
            {"r": run_id},
        )
        return Counter({(r.topic, r.partition): r.read_records for r in rows})


def _poison_at_0(tag: str) -> list[OutRecord]:
    return [OutRecord(value=f"{tag} poison".encode(), key=f"{tag}0".encode())] + [
        OutRecord(value=f"{tag}{i}".encode(), key=f"{tag}{i}".encode()) for i in range(1, 5)
    ]


def _accept_new_topic(drain) -> None:
    recreate_topic(drain, 0)
    produce_records(drain, _poison_at_0("new"), level=0, partition=0)
    done = cli("rewind", drain.name, "--level", "0", "--to-earliest", "--reason", "recreated")
    assert done.returncode == 0, done.stderr


def test_attempts_and_dead_letters_of_a_recreated_topic_start_afresh(make_drain, spark):
    """Both were keyed by (topic, partition, offset) only. Before: the new topic's record at
    offset 0 inherited the old record's attempt and went to the dead letters after one attempt
    of max_attempts 2; and a new dead letter at the old one's offset overwrote it, keeping the
    old record's key and value under the new error."""
    poison = {**RECORD_ECHO, "handler": "tests.processors:poison_echo", "ordering": "unordered"}
    counting = make_drain(levels=1, partitions=1, max_attempts=2, **poison)
    produce_records(counting, _poison_at_0("old"), level=0, partition=0)
    old_id = _topic_id(counting)
    first = drain_job.run(counting.name, trigger="test", settings=load_settings())
    assert (first.levels[0].failed, first.levels[0].dead_lettered) == (1, 0)
    topic = counting.level_topic(0)
    assert _attempts(counting) == [(topic, 0, 0, old_id, 1)]
    _accept_new_topic(counting)
    after = drain_job.run(counting.name, trigger="test", settings=load_settings())
    assert (after.levels[0].failed, after.levels[0].dead_lettered) == (1, 0)  # its 1st attempt
    new_id = _topic_id(counting)
    assert new_id != old_id and _attempts(counting) == [(topic, 0, 0, new_id, 1)]

    dead = make_drain(levels=1, partitions=1, max_attempts=1, **poison)
    produce_records(dead, _poison_at_0("old"), level=0, partition=0)
    assert (
        drain_job.run(dead.name, trigger="test", settings=load_settings()).levels[0].dead_lettered
        == 1
    )
    _accept_new_topic(dead)
    assert (
        drain_job.run(dead.name, trigger="test", settings=load_settings()).levels[0].dead_lettered
        == 1
    )
    with get_engine().connect() as conn:
        letters = conn.execute(
            text('SELECT "offset", value FROM dead_letters WHERE drain = :d ORDER BY id'),
            {"d": dead.name},
        ).all()
    assert [(o, bytes(v)) for o, v in letters] == [(0, b"old poison"), (0, b"new poison")]


def _attempts(drain) -> list[tuple[str, int, int, str, int]]:
    """record_attempts of the drain: (topic, partition, offset, topic_id, attempts)."""
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                'SELECT topic, partition, "offset", topic_id, attempts FROM record_attempts '
                'WHERE drain = :d ORDER BY partition, "offset", attempts'
            ),
            {"d": drain.name},
        ).all()
    return [tuple(r) for r in rows]


def _topic_id(drain, level: int = 0) -> str:
    topic = drain.level_topic(level)
    with KafkaSession(drain, load_settings()) as kafka:
        return kafka.topic_ids([topic])[topic]


def test_a_rewind_restarts_the_attempts_of_the_records_it_drains_again(make_drain, spark):
    """A rewind of the same topic drains its records again from scratch: a poison record that
    had failed attempts gets max_attempts new ones before it is dead-lettered. Fails if the
    rewind kept the attempts (the third run would dead-letter it after one attempt) or if the
    attempts were stored without the topic's id."""
    poison = {**RECORD_ECHO, "handler": "tests.processors:poison_echo", "ordering": "unordered"}
    drain = make_drain(levels=1, partitions=1, max_attempts=3, **poison)
    topic = drain.level_topic(0)
    records = [
        OutRecord(value=b"poison" if i == 2 else f"v{i}".encode(), key=f"k{i}".encode())
        for i in range(5)
    ]
    produce_records(drain, records, level=0, partition=0)
    topic_id = _topic_id(drain)

    for attempt in (1, 2):  # offset 2 fails; 0, 1, 3, 4 are done
        result = drain_job.run(drain.name, trigger="test", settings=load_settings())
        assert (result.levels[0].failed, result.levels[0].dead_lettered) == (1, 0)
        assert _attempts(drain) == [(topic, 0, 2, topic_id, attempt)]
    assert stored_offsets(drain)[(topic, 0)][0] == 2

    rewound = cli("rewind", drain.name, "--level", "0", "--to-offset", "0", "--reason", "fix")
    assert rewound.returncode == 0, rewound.stderr
    assert _attempts(drain) == []  # forgotten: offset 2 is drained again from its first attempt

    for attempt in (1, 2):
        result = drain_job.run(drain.name, trigger="test", settings=load_settings())
        assert (result.levels[0].failed, result.levels[0].dead_lettered) == (1, 0), attempt
        assert _attempts(drain) == [(topic, 0, 2, topic_id, attempt)]
    last = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert (last.levels[0].failed, last.levels[0].dead_lettered) == (1, 1)  # the 3rd, again
    assert _attempts(drain) == []
    with get_engine().connect() as conn:
        letters = conn.execute(
            text('SELECT "offset", topic_id, attempts FROM dead_letters WHERE drain = :d'),
            {"d": drain.name},
        ).all()
    assert [tuple(r) for r in letters] == [(2, topic_id, 3)]
    assert stored_offsets(drain)[(topic, 0)] == (5, "")
    # 0, 1, 3, 4 once before the rewind and once after; the poison record never
    assert sink_keys(drain) == {f"k{i}": 2 for i in (0, 1, 3, 4)}


def test_the_old_topics_attempts_are_not_counted_for_the_new_topics_record_at_that_offset(
    make_drain, spark
):
    """Isolates the topic id in the attempts' key, which the test above cannot: there the
    rewind forgets every attempt. Here only partition 0 is rewound after the recreation, so the
    old topic's attempt at partition 1, offset 0 stays, and the new topic's poison record at that
    offset must start at attempt 1. Keyed by (topic, partition, offset) alone it would count 2
    and go to the dead letters at max_attempts 2."""
    poison = {**RECORD_ECHO, "handler": "tests.processors:poison_echo", "ordering": "unordered"}
    drain = make_drain(levels=1, partitions=2, max_attempts=2, **poison)
    topic = drain.level_topic(0)
    produce_records(drain, _keyed("a", 3), level=0, partition=0)
    produce_records(drain, _poison_at_0("old"), level=0, partition=1)
    old_id = _topic_id(drain)
    first = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert (first.levels[0].failed, first.levels[0].dead_lettered) == (1, 0)
    assert _attempts(drain) == [(topic, 1, 0, old_id, 1)]

    recreate_topic(drain, 0)
    produce_records(drain, _keyed("b", 3), level=0, partition=0)
    produce_records(drain, _poison_at_0("new"), level=0, partition=1)
    new_id = _topic_id(drain)
    assert new_id != old_id
    done = cli(
        "rewind", drain.name, "--level", "0", "--to-earliest", "--partitions", "0",
        "--reason", "recreated; partition 1 keeps its offsets",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _attempts(drain) == [(topic, 1, 0, old_id, 1)]  # partition 1 was not rewound

    after = drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert (after.levels[0].failed, after.levels[0].dead_lettered) == (1, 0)
    # topic ids are random, so the two rows at the same offset come in no fixed order
    assert set(_attempts(drain)) == {(topic, 1, 0, old_id, 1), (topic, 1, 0, new_id, 1)}
    with get_engine().connect() as conn:
        dead = conn.scalar(
            text("SELECT count(*) FROM dead_letters WHERE drain = :d"), {"d": drain.name}
        )
    assert dead == 0
