"""The Kafka sink's protocol is defined once (drainer.sinks.kafka.protocol) and both producers
apply it alike: the marker's template filled by the driver's rule and by the Java writer's
(`KafkaTxnSink.fill`), and the failure kinds the Java writer is handed. The Java writer is
compiled here with the JDK's javac (so a change that breaks its build fails the unit tests),
when a JDK and Spark's kafka-clients jar (resolved by `drainer services up`) are at hand.
tests/integration/test_kafka_sink_protocol.py compares the two producers on the real broker.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from drainer.settings import load_settings
from drainer.sinks.kafka.protocol import (
    BYTES_TOKEN,
    KINDS,
    PRODUCED_TOKEN,
    RunMarker,
    fill,
    java_kinds,
)
from drainer.sinks.kafka.server_jar import source
from drainer.spark.javac import compile_jar, has_jdk, pyspark_jars

HERE = Path(__file__).resolve().parent
ERRORS = "org.apache.kafka.common.errors."
# (exception class, the kind the driver's table gives it): subclasses count as their parent
JAVA_CASES = [
    (f"{ERRORS}ProducerFencedException", "fenced"),
    (f"{ERRORS}InvalidProducerEpochException", "fenced"),
    (f"{ERRORS}TopicAuthorizationException", "denied"),
    (f"{ERRORS}UnknownTopicOrPartitionException", "missing"),
    (f"{ERRORS}RecordTooLargeException", "too_large"),
    (f"{ERRORS}TimeoutException", "timeout"),
    (f"{ERRORS}NetworkException", "unavailable"),
]


def _marker(**extra) -> RunMarker:
    return RunMarker("orders", 7, "2026-11-28T16:00:00.123456", 2, {}, 0, **extra)


def test_the_marker_is_its_template_filled_and_reads_back():
    marker = _marker(dlq_max_attempts=5, dead_letters=3)
    template = marker.template()
    assert PRODUCED_TOKEN in template and BYTES_TOKEN in template
    produced = {"out-b": 4, "out-a": 2, "empty": 0}
    value = fill(template, produced, 99)
    # sorted keys, compact, topics with records only
    assert value == (
        '{"attempt":2,"bytes":99,"dlq":{"max_attempts":5,"records":3},"drain":"orders",'
        '"nonce":"2026-11-28T16:00:00.123456","produced":{"out-a":2,"out-b":4},"run":7}'
    )
    parsed = RunMarker.parse(value.encode(), 12)
    assert parsed is not None and parsed.produced == {"out-a": 2, "out-b": 4}
    assert parsed.size == 99 and parsed.offset == 12 and parsed.dlq_max_attempts == 5


def test_a_drain_name_that_looks_like_a_placeholder_is_not_filled():
    """A quote in a JSON string is escaped, so the tokens match the fields only."""
    hostile = RunMarker(PRODUCED_TOKEN, 1, BYTES_TOKEN, 1, {"t": 1}, 5)
    parsed = RunMarker.parse(hostile.value(), 0)
    assert parsed is not None
    assert (parsed.drain, parsed.nonce, parsed.produced, parsed.size) == (
        PRODUCED_TOKEN,
        BYTES_TOKEN,
        {"t": 1},
        5,
    )


def test_the_kinds_table_names_a_java_class_and_a_code_for_every_kind():
    assert all(codes and classes for codes, classes in KINDS.values())
    assert java_kinds().split(";")[0].startswith("fenced=" + ERRORS)


def _kafka_clients() -> Path | None:
    found = sorted((load_settings().home / "jars").rglob("kafka-clients-*.jar"))
    return found[-1] if found else None


@pytest.fixture(scope="module")
def writer(tmp_path_factory) -> list[Path]:
    """The Java writer and the check harness compiled, or a skip saying what is missing."""
    clients = _kafka_clients()
    java = source()
    if not has_jdk() or clients is None or java is None:
        pytest.skip("needs a JDK (javac, jar) and the kafka-clients jar `services up` resolves")
    out = tmp_path_factory.mktemp("jvm")
    classpath = [*sorted(pyspark_jars().glob("*.jar")), clients]
    compile_jar(java, classpath, out / "sink.jar")
    compile_jar(HERE / "jvm" / "ProtocolCheck.java", [*classpath, out / "sink.jar"], out / "c.jar")
    return [*classpath, out / "sink.jar", out / "c.jar"]


def test_the_java_writer_fills_the_marker_and_names_kinds_as_the_driver_does(writer):
    template = _marker(dlq_max_attempts=5, dead_letters=3).template()
    counts = {"out-b": (4, 40), "out-a": (2, 59), "empty": (0, 0)}
    done = subprocess.run(
        [
            "java",
            "-cp",
            ":".join(map(str, writer)),
            "drainer.ProtocolCheck",
            template,
            PRODUCED_TOKEN,
            BYTES_TOKEN,
            java_kinds(),
            *(f"{t}={n}:{b}" for t, (n, b) in counts.items()),
            "--",
            *(name for name, _ in JAVA_CASES),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == fill(template, {t: n for t, (n, _) in counts.items()}, 99)
    assert lines[1:] == [kind for _, kind in JAVA_CASES]
