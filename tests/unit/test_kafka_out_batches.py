"""The Kafka sink's produce loop and its error lines, without a broker: what each bad input says.

The real-stack tests (tests/integration/test_kafka_sink.py) cover a missing topic, a row without
a value and an oversized record end to end; a broker that refuses the transactional id or has
no transaction coordinator cannot be set up on the shared local broker, so the mapping of those
broker errors to one line with the fix is checked here, from the error codes librdkafka gives.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from drainer.errors import ConfigError, FencedOut, KafkaUnavailable
from drainer.sinks.kafka import protocol
from drainer.sinks.kafka.out_batches import OutBatch, send_batch
from drainer.sinks.kafka.protocol import MARKER_TOPIC, SOURCE_HEADER
from drainer.sinks.kafka.transactions import RunTransaction

RUN_HEADERS = [("drainer.run", b"7:n")]


def _txn() -> RunTransaction:
    return RunTransaction({"bootstrap.servers": "localhost:1"}, "orders", 7, "n")


class _Producer:
    def __init__(self, full_once: bool = False, refuse: KafkaError | None = None) -> None:
        self.sent: list[tuple[str, Any, Any, list[Any], dict[str, Any]]] = []
        self.full_once, self.refuse, self.polls = full_once, refuse, 0

    def produce(self, topic: str, value: Any, key: Any, headers: Any, **kwargs: Any) -> None:
        if self.full_once:
            self.full_once = False
            raise BufferError
        if self.refuse is not None and len(self.sent) == 1:
            raise KafkaException(self.refuse)
        self.sent.append((topic, value, key, headers, kwargs))

    def poll(self, _timeout: float) -> int:
        self.polls += 1
        return 0


def _send(
    producer: _Producer,
    batch: OutBatch,
    known: set[str] | None = None,
    tombstones: bool = False,
) -> Counter[str]:
    produced: Counter[str] = Counter()
    send_batch(
        producer.produce,
        producer.poll,
        batch,
        "out",
        {"out", "other"} if known is None else known,
        RUN_HEADERS,
        produced,
        _txn()._produce_failed,
        tombstones,
    )
    return produced


def test_each_record_carries_its_own_headers_then_the_runs_then_its_source():
    producer = _Producer(full_once=True)
    batch = OutBatch(
        values=[b"a", b"b"],
        keys=[b"k", None],
        headers=[[("h", b"1"), ("h", b"2")], None],
        partitions=[None, 1],
        topics=[None, "other"],
        sources=[b"t-0/0/5", b"t-0/0/6"],
    )
    assert _send(producer, batch) == {"out": 1, "other": 1}
    assert producer.polls == 1  # a full queue: delivered, then the record again
    (t1, v1, k1, h1, kw1), (t2, v2, k2, h2, kw2) = producer.sent
    assert (t1, v1, k1, kw1) == ("out", b"a", b"k", {})
    assert h1 == [("h", b"1"), ("h", b"2"), *RUN_HEADERS, (SOURCE_HEADER, b"t-0/0/5")]
    assert (t2, v2, k2, kw2) == ("other", b"b", None, {"partition": 1})
    assert h2 == [*RUN_HEADERS, (SOURCE_HEADER, b"t-0/0/6")]


@pytest.mark.parametrize("routed", [False, True], ids=["plain", "routed"])
def test_a_row_without_value_names_its_source_and_nothing_of_the_batch_after_it_is_sent(routed):
    producer = _Producer()
    batch = OutBatch(
        values=[b"a", None, b"c"],
        sources=[b"t/0/1", b"t/0/2", b"t/0/3"],
        partitions=[0, 1, 2] if routed else None,  # per-row routing takes the general loop
    )
    with pytest.raises(ConfigError, match=r"row \(from source record t/0/2\) has no `value`"):
        _send(producer, batch)
    # the plain loop checks the batch before it sends; the general one stops at the row
    assert [v for _, v, *_ in producer.sent] == ([b"a"] if routed else [])


@pytest.mark.parametrize("routed", [False, True], ids=["plain", "routed"])
def test_an_upsert_sinks_null_value_is_a_tombstone_with_its_key(routed):
    producer = _Producer()
    batch = OutBatch(
        values=[b"a", None],
        keys=[b"k1", b"k2"],
        sources=[b"t/0/1", b"t/0/2"],
        partitions=[0, 0] if routed else None,
    )
    assert _send(producer, batch, tombstones=protocol.tombstones("upsert")) == {"out": 2}
    assert [(v, k) for _, v, k, *_ in producer.sent] == [(b"a", b"k1"), (None, b"k2")]
    assert not protocol.tombstones("append")


def test_a_missing_topic_is_named_with_the_command_before_any_record_is_sent():
    producer = _Producer()
    batch = OutBatch(values=[b"a", b"b"], topics=[None, "nowhere"], sources=[b"t/0/1", b"t/0/2"])
    with pytest.raises(ConfigError, match="output topic nowhere does not exist") as err:
        _send(producer, batch)
    assert "--topic nowhere" in str(err.value) and "t/0/2" in str(err.value)
    assert producer.sent == []
    with pytest.raises(ConfigError, match="output topic out does not exist"):
        _send(producer, OutBatch(values=[b"a"]), known={"other"})


def test_a_record_the_producer_refuses_as_too_large_names_its_source_offset():
    producer = _Producer(refuse=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    batch = OutBatch(values=[b"a", b"x" * 10], sources=[b"t-0/0/2", b"t-0/0/3"])
    with pytest.raises(ConfigError, match="larger than the broker accepts") as err:
        _send(producer, batch)
    assert "source record t-0/0/3" in str(err.value) and "max.message.bytes" in str(err.value)


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    ],
)
def test_not_authorised_names_the_acls_to_grant(code):
    err = _txn()._init_failed(KafkaException(KafkaError(code)))
    assert isinstance(err, ConfigError) and "\n" not in str(err)
    assert "TransactionalId:drainer-orders" in str(err) and MARKER_TOPIC in str(err)
    assert "Nothing was produced or committed" in str(err)
    refused = _txn()._produce_failed(KafkaError(code), "t/0/1", "out")
    assert isinstance(refused, ConfigError) and "grant WRITE on it" in str(refused)


@pytest.mark.parametrize("code", [KafkaError._TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE])
def test_a_broker_without_transactions_names_the_broker_settings(code):
    err = _txn()._init_failed(KafkaException(KafkaError(code)))
    assert isinstance(err, KafkaUnavailable) and "\n" not in str(err)
    assert "transaction.state.log.replication.factor" in str(err)
    assert "transaction.state.log.min.isr" in str(err) and "Nothing was" in str(err)


def test_a_newer_attempt_fences_this_one():
    err = _txn()._produce_failed(KafkaError(KafkaError._FENCED), None, "out")
    assert isinstance(err, FencedOut) and "nothing of it is visible" in str(err)


def test_the_plain_loop_retries_a_record_the_full_queue_refused_and_names_a_refused_ones_source():
    producer = _Producer(full_once=True)
    batch = OutBatch(values=[b"a", b"b"], keys=[b"k", None], sources=[b"t-0/0/5", b"t-0/0/6"])
    assert _send(producer, batch) == {"out": 2}
    assert producer.polls == 1
    assert [(t, v, k, h) for t, v, k, h, _ in producer.sent] == [
        ("out", b"a", b"k", [*RUN_HEADERS, (SOURCE_HEADER, b"t-0/0/5")]),
        ("out", b"b", None, [*RUN_HEADERS, (SOURCE_HEADER, b"t-0/0/6")]),
    ]
    refusing = _Producer(refuse=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    with pytest.raises(ConfigError, match=r"record \(from source record t-0/0/6\) for topic out"):
        _send(refusing, batch)


def test_the_run_header_names_run_nonce_and_attempt_and_reads_back():
    from drainer.sinks.kafka.protocol import parse_run_header, run_header

    assert run_header(42, "3f9a", 2) == b"42:3f9a:2"
    assert parse_run_header(run_header(42, "3f9a", 2)) == (42, "3f9a", 2)


def test_a_marker_carries_its_dead_letters_rule_and_an_older_marker_reads_without_one():
    from drainer.sinks.kafka.protocol import RunMarker

    joined = RunMarker("d", 7, "ab12", 2, {"out": 297, "dlq": 3}, 1000, 0, 5, 3)
    assert RunMarker.parse(joined.value(), 41) == joined.__class__(
        "d", 7, "ab12", 2, {"out": 297, "dlq": 3}, 1000, 41, 5, 3
    )
    older = b'{"attempt":1,"bytes":10,"drain":"d","nonce":"n","produced":{"out":1},"run":3}'
    parsed = RunMarker.parse(older, 9)
    assert parsed is not None and parsed.dlq_max_attempts is None and parsed.dead_letters == 0


def test_a_sink_commit_on_record_keeps_the_dead_letters_rule_it_was_made_with():
    """A resumed run reads the proof on record (`as_dict` then `from_dict`): losing the rule
    there would leave the commit to publish the dead letters the transaction carried again."""
    from drainer.sinks import SinkCommit

    joined = SinkCommit("kafka", "out", id=12, rows=297, bytes=900, attempt=2, dlq_max_attempts=5)
    assert SinkCommit.from_dict(joined.as_dict(), files=False) == SinkCommit(
        "kafka", "out", id=12, rows=297, bytes=900, dlq_max_attempts=5
    )
    plain = SinkCommit("delta", "/t", id=3, rows=1, bytes=10, files=1)
    assert "dlq_max_attempts" not in plain.as_dict()
    assert SinkCommit.from_dict(plain.as_dict()) == plain


def test_a_kafka_commit_has_no_files_and_an_older_record_of_one_still_loads():
    """Older versions stored a Kafka commit's number of topics as `files_added`: it loads,
    without files, and is shown without them."""
    from drainer.sinks import SinkCommit

    older = {
        "format": "kafka",
        "location": "out",
        "version": 41,
        "files_added": 2,
        "bytes_added": 900,
        "rows_added": 297,
        "details": {"produced": {"out": 290, "dlq": 7}},
    }
    commit = SinkCommit.from_dict(older, files=False)
    assert commit is not None and commit.files is None and commit.id == 41
    assert "files_added" not in commit.as_dict()
    assert "files" not in str(commit.as_dict())


@pytest.mark.parametrize(
    ("attempts", "error", "dead"),
    [(1, "boom", False), (3, "boom", True), (4, "boom", True), (1, "undecodable: bad", True)],
)
def test_a_record_is_a_dead_letter_at_max_attempts_or_when_it_cannot_decode(attempts, error, dead):
    from drainer.store.dead_letters import is_dead_letter

    assert is_dead_letter(attempts, 3, error) is dead
