"""Round trips a run makes to the Spark Connect server before its job, in counts (issue 51):
each AnalyzePlan asks the server to analyse the whole read again. The counting wraps the
session's real client; every call still goes to the server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drainer.settings import load_settings
from drainer.store.runs import StoredRange
from spark_jobs.kafka_source import counted, read_ranges
from spark_jobs.session import is_connect
from spark_jobs.sinks.kafka import named_kafka_rows


@pytest.fixture
def analyses(spark, monkeypatch) -> Iterator[list[str]]:
    """The AnalyzePlan requests the session's client sends while the test runs."""
    if not is_connect(spark):
        pytest.skip("a classic session analyses in its own JVM: no round trip to count")
    client = spark.client
    asked: list[str] = []
    real = client._analyze

    def analyze(method: str, **kwargs):
        asked.append(method)
        return real(method, **kwargs)

    monkeypatch.setattr(client, "_analyze", analyze)
    yield asked


def test_counting_a_read_asks_the_server_nothing(make_drain, spark, analyses):
    drain = make_drain(partitions=1)
    ranges = [StoredRange(drain.level_topic(0), 0, 0, 0, 10, "", 10)]
    df = read_ranges(
        spark, drain, load_settings().bootstrap_servers, ranges, home=load_settings().home
    )
    observed, _ = counted(df, ranges, full={(drain.level_topic(0), 0): 10})
    assert observed is not df and analyses == []  # the observation attached, nothing asked


def test_the_kafka_sinks_rows_name_their_columns_without_asking_again(make_drain, spark, analyses):
    drain = make_drain(partitions=1)
    ranges = [StoredRange(drain.level_topic(0), 0, 0, 0, 10, "", 10)]
    df = read_ranges(
        spark, drain, load_settings().bootstrap_servers, ranges, home=load_settings().home
    )
    out = df.select("topic", "partition", "offset", "key", "value", "headers")
    rows, columns = named_kafka_rows(out)
    assert analyses == ["schema"]  # the processor's output, once: which columns it has
    assert columns == ["value", "key", "headers", "source"] == rows.columns
