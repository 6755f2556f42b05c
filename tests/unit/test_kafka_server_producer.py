"""The Kafka sink's server producer, driver side: when a run may use it, and how a failure the
Java writer names becomes drainer's one-line error (the writer itself runs in the integration
tests, on the real Connect server)."""

from __future__ import annotations

import pytest

from drainer.config.sink_models import KafkaSinkConfig
from drainer.errors import ConfigError, FencedOut, KafkaUnavailable
from drainer.sinks.kafka.server_jar import SERVER_CONF
from drainer.sinks.kafka.transactions import RunTransaction
from spark_jobs.sinks.kafka import server as kafka_server


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values, self.asked = values, 0

    def get(self, key: str, default: str | None = None) -> str | None:
        self.asked += 1
        return self.values.get(key, default)


class _Session:
    def __init__(self, jar: str = "drainer-kafka-sink-1.jar", master: str = "local[*]") -> None:
        self.conf = _Conf({SERVER_CONF: jar, "spark.master": master} if jar else {})


def _sink(**extra) -> KafkaSinkConfig:
    return KafkaSinkConfig(topic="out", **extra)


def test_a_server_with_the_jar_on_a_local_master_produces_and_is_asked_once():
    spark = _Session()
    assert kafka_server.why_not_on_server(spark, _sink(), ["value", "source"]) is None
    assert kafka_server.why_not_on_server(spark, _sink(), ["value"]) is None
    assert spark.conf.asked == 2  # the jar and the master, once per session


@pytest.mark.parametrize(
    ("spark", "sink", "columns", "reason"),
    [
        (_Session(), _sink(producer="driver"), ["value"], "producer: driver"),
        (
            _Session(),
            _sink(kafka={"bootstrap.servers": "out:9092"}),
            ["value"],
            "a cluster of its own",
        ),
        (_Session(), _sink(), ["value", "topic"], "name their own topics"),
        (_Session(jar=""), _sink(), ["value"], "drainer services up"),
        (_Session(master="spark://h:7077"), _sink(), ["value"], "other JVMs"),
    ],
)
def test_the_driver_produces_where_the_server_cannot_and_says_why(spark, sink, columns, reason):
    assert reason in (kafka_server.why_not_on_server(spark, sink, columns) or "")


def test_producer_takes_auto_server_or_driver_only():
    assert _sink().producer == "auto"
    with pytest.raises(ValueError, match="auto"):
        _sink(producer="jvm")


def _txn() -> RunTransaction:
    return RunTransaction({"bootstrap.servers": "x:9092"}, "orders", 7, "n1")


def _raised(message: str) -> Exception:
    """What the Java writer's failure looks like on the client: wrapped in Spark's text."""
    with pytest.raises(Exception) as caught:
        kafka_server._run(_txn(), "out", lambda: (_ for _ in ()).throw(RuntimeError(message)))
    return caught.value


@pytest.mark.parametrize(
    ("java", "kind", "text"),
    [
        (
            "drainer-kafka-sink[too_large][lvl-0/0/3][out] RecordTooLargeException: big",
            ConfigError,
            "source record lvl-0/0/3",
        ),
        ("drainer-kafka-sink[no_value][lvl-0/1/9][out] ", ConfigError, "has no `value`"),
        (
            "drainer-kafka-sink[denied][][out] TopicAuthorizationException: no",
            ConfigError,
            "grant WRITE on it",
        ),
        ("drainer-kafka-sink[fenced][][out] ProducerFencedException", FencedOut, "newer attempt"),
        (
            "drainer-kafka-sink[init_timeout][][out] TimeoutException: waited",
            KafkaUnavailable,
            "transaction.state.log.replication.factor",
        ),
        (
            "drainer-kafka-sink[init_denied][][out] TransactionalIdAuthorizationException",
            ConfigError,
            "TransactionalId:drainer-orders",
        ),
        (
            "drainer-kafka-sink[settings][][out] ConfigException: Invalid value x",
            ConfigError,
            "kafka_java:",
        ),
        ("drainer-kafka-sink[gone][][out] no longer open", KafkaUnavailable, "rerun"),
    ],
)
def test_a_failure_the_server_producer_names_is_drainers_one_line_error(java, kind, text):
    wrapped = f"Job aborted due to stage failure: ... IllegalStateException: {java}\n\tat x.y"
    err = _raised(wrapped)
    assert isinstance(err, kind) and text in str(err) and "\n" not in str(err)


def test_any_other_spark_failure_is_left_as_it_is():
    err = _raised("[TABLE_OR_VIEW_NOT_FOUND] something else")
    assert type(err) is RuntimeError


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        (
            "close=2.0;commit=1.5;flush=0.0;marker=11.25;open=130.0",
            {
                "server_close": 0.002,
                "server_commit": 0.0015,
                "server_flush": 0.0,
                "server_marker": 0.01125,
                "server_open": 0.13,
            },
        ),
        ("", {}),
        ("open=oops;commit=3", {"server_commit": 0.003}),  # a step that is no number is left out
    ],
)
def test_the_server_producers_steps_become_seconds_of_the_runs_phases(text, steps):
    found = kafka_server.server_steps(text)
    assert found.keys() == steps.keys()
    assert all(found[k] == pytest.approx(v) for k, v in steps.items())
