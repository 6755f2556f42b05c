"""Every registered sink keeps the whole promise of the interface, on both sides of a run."""

from __future__ import annotations

import inspect

import pytest

from drainer.config.sinks import SINK_MODELS
from drainer.settings import load_settings
from drainer.sinks import SINKS, Capabilities, Sink, sink_for
from spark_jobs.sinks import SPARK_SINKS, SparkSink

EXAMPLES = {
    "postgres": {"table": "orders_out"},
    "delta": {"type": "delta", "path": "orders"},
    "iceberg": {"type": "iceberg", "table": "lake.orders"},
    "kafka": {"type": "kafka", "topic": "orders-out"},
}


def _interface(base: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(base)
        if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))
    }


def test_every_configurable_sink_type_is_registered_on_both_sides():
    assert set(SINKS) == set(SPARK_SINKS) == set(SINK_MODELS) == set(EXAMPLES)


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_each_sink_implements_the_whole_interface(kind):
    driver, spark = SINKS[kind], SPARK_SINKS[kind]
    for cls, base in ((driver, Sink), (spark, SparkSink)):
        assert issubclass(cls, base)
        assert not inspect.isabstract(cls), f"{cls.__name__} leaves {cls.__abstractmethods__}"
        assert _interface(base) <= _interface(cls)
    assert issubclass(spark, driver), "the Spark half extends its format's driver side"
    assert driver.type == spark.type == kind
    assert isinstance(driver.capabilities, Capabilities)
    assert driver.capabilities.commit in ("in_postgres", "before_postgres")


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_each_sink_says_where_it_lives_without_touching_anything(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("DRAINER_WAREHOUSE", str(tmp_path))
    config = SINK_MODELS[kind].model_validate(EXAMPLES[kind])
    sink = sink_for(config, load_settings())
    assert sink.location() and sink.location() in sink.describe()
    assert sink.kind == kind
    # a sink whose commit precedes Postgres's needs a proof: its Spark half finds the commit
    finds = SPARK_SINKS[kind].committed is not SparkSink.committed
    assert (sink.capabilities.commit == "before_postgres") == finds


def test_each_sink_names_its_output_as_a_uri_without_credentials(tmp_path, monkeypatch):
    """`Sink.uri()`: the name an orchestrator's asset gives the table (drainer.airflow)."""
    monkeypatch.setenv("DRAINER_WAREHOUSE", str(tmp_path))
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://ops:s3cret@db.internal:6543/drains")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "b1:9092,b2:9092")
    settings = load_settings()
    uris = {
        kind: sink_for(SINK_MODELS[kind].model_validate(example), settings).uri()
        for kind, example in EXAMPLES.items()
    }
    assert uris == {
        "postgres": "postgres://db.internal:6543/drains/public/orders_out",
        "delta": (tmp_path / "orders").as_uri(),
        "iceberg": "iceberg://drainer/lake/orders",
        "kafka": "kafka://b1:9092/orders-out",
    }
    assert not any("s3cret" in uri for uri in uris.values())
