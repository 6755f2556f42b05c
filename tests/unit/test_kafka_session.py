"""The Kafka session: clients made on first use, closed once; Kafka's errors keep their code."""

from __future__ import annotations

import time

import pytest
import yaml
from confluent_kafka import KafkaError, KafkaException

from drainer.config import load_drains
from drainer.errors import KafkaUnavailable
from drainer.kafka.clients import kafka_error, retry_passing
from drainer.kafka.session import KafkaSession
from drainer.settings import load_settings

BASE = {"topic": "orders", "group": "billing", "levels": 3, "budget": 70, "sink": {"table": "out"}}


def drain(tmp_path):
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": {"orders": BASE}}))
    return load_drains(path)["orders"]


@pytest.mark.parametrize(
    ("err", "code", "retriable"),
    [
        (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), "UNKNOWN_TOPIC_OR_PART", False),
        (KafkaException(KafkaError(KafkaError._TRANSPORT)), "_TRANSPORT", False),
        (KafkaError(KafkaError.NOT_COORDINATOR, retriable=True), "NOT_COORDINATOR", True),
        # retriable by Kafka's protocol, though librdkafka's admin results do not flag it
        (KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION), "NOT_LEADER_FOR_PARTITION", True),
        (TimeoutError(), "_TIMED_OUT", True),
    ],
)
def test_kafka_errors_keep_kafkas_code_and_retriability(err, code, retriable):
    found = kafka_error("committing offsets of group g-0: it failed", err)
    assert isinstance(found, KafkaUnavailable)
    assert (found.code, found.retriable) == (code, retriable)
    assert str(found) == "committing offsets of group g-0: it failed"


def test_a_session_makes_no_client_before_one_is_needed_and_closes_twice(tmp_path):
    with KafkaSession(drain(tmp_path), load_settings()) as kafka:
        assert (kafka._admin, kafka._consumer, kafka._producer) == (None, None, None)
        producer = kafka.producer
        assert kafka.producer is producer  # one per session, not per call
    assert kafka._producer is None
    kafka.close()


def test_an_unreachable_cluster_is_one_error_with_its_code(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    started = time.monotonic()
    with (
        KafkaSession(drain(tmp_path), load_settings()) as kafka,
        pytest.raises(KafkaUnavailable) as info,
    ):
        kafka.watermarks({0: [0]})
    assert time.monotonic() - started < 5  # the first contact gives up early: nothing listens
    assert "Kafka at 127.0.0.1:1 did not answer" in str(info.value)
    assert info.value.code is not None and info.value.code.startswith("_")


def test_a_just_started_brokers_coordinator_load_is_logged_as_detail_not_printed(caplog):
    """librdkafka's `GETPID ... Coordinator load in progress: retrying` goes through drainer's
    logging at DEBUG (shown with -v), not into a command's or the demo's output."""
    import logging

    from drainer.kafka.clients import _LibrdkafkaLog

    librdkafka = _LibrdkafkaLog()
    with caplog.at_level(logging.DEBUG, logger="drainer.librdkafka"):
        librdkafka.log(
            logging.WARNING,
            "%s",
            "GETPID [rdkafka#producer-1] [thrd:main]: Failed to acquire transactional PID "
            "from broker TxnCoordinator/1: Broker: Coordinator load in progress: retrying",
        )
        librdkafka.log(logging.WARNING, "%s", "a warning that matters")
    levels = {r.getMessage()[:6]: r.levelno for r in caplog.records}
    assert levels == {"GETPID": logging.DEBUG, "a warn": logging.WARNING}


@pytest.mark.parametrize(
    "code", [KafkaError.FENCED_LEADER_EPOCH, KafkaError._NOENT, KafkaError.NOT_LEADER_FOR_PARTITION]
)
def test_a_request_refused_for_stale_metadata_refreshes_it_before_the_retry(code, monkeypatch):
    """A broker back from a crash refuses the leader epochs the client still has: retrying
    without a metadata refresh is refused alike (the integration test kills a broker)."""
    monkeypatch.setattr("drainer.kafka.clients.RETRY_S", 0.0)
    calls: list[str] = []

    def request() -> str:
        calls.append("request")
        if "refresh" not in calls:
            raise KafkaException(KafkaError(code))
        return "offsets"

    assert retry_passing(request, lambda: calls.append("refresh")) == "offsets"
    assert calls == ["request", "refresh", "request"]


def test_a_refusal_that_is_not_passing_is_raised_at_once_refresh_or_not():
    def refused(code: int):
        def request() -> str:
            raise KafkaException(KafkaError(code))

        return request

    with pytest.raises(KafkaException):
        retry_passing(
            refused(KafkaError.TOPIC_AUTHORIZATION_FAILED),
            lambda: pytest.fail("refreshed for a refusal that is not stale metadata"),
        )
    with pytest.raises(KafkaException):  # without a refresh, "no leader" is not waited out
        retry_passing(refused(KafkaError._NOENT))
