"""drainer's sessions take Kafka off Spark's V1 source list, and nothing else."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spark_jobs.session import V1_SOURCES, v2_reads


class Conf:
    def __init__(self, value: str | None) -> None:
        self.values = {V1_SOURCES: value}
        self.sets = 0

    def get(self, key: str) -> str | None:
        return self.values[key]

    def set(self, key: str, value: str) -> None:
        self.values[key] = value
        self.sets += 1


@pytest.mark.parametrize(
    ("server", "expected", "sets"),
    [
        ("avro,csv,json,kafka,orc,parquet,text", "avro,csv,json,orc,parquet,text", 1),
        ("KAFKA,parquet", "parquet", 1),  # Spark compares the names case-insensitively
        ("kafka", "", 1),
        ("avro,parquet", "avro,parquet", 0),  # already off: no round trip to set it
        ("", "", 0),
        (None, None, 0),
    ],
)
def test_only_kafka_leaves_the_v1_source_list(server, expected, sets):
    conf = Conf(server)
    v2_reads(SimpleNamespace(conf=conf))
    assert conf.values[V1_SOURCES] == expected and conf.sets == sets
