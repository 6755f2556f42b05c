"""Every registered sink keeps the whole promise of the interface, on both sides of a run."""

from __future__ import annotations

import inspect

import pytest

from drainer.config.sink_models import SINK_MODELS
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
    assert _interface_gaps(SPARK_SINKS[kind]) == []


def _interface_gaps(spark_cls: type) -> list[str]:
    """What a sink's Spark half leaves out of the interface: its abstract methods, and for a
    sink that commits before Postgres, a `committed` of its own (the lookup a resumed run
    makes: without it the run writes twice)."""
    gaps = sorted(getattr(spark_cls, "__abstractmethods__", ()))
    commits_first = spark_cls.capabilities.commit == "before_postgres"
    own = any("committed" in vars(c) for c in spark_cls.__mro__ if c not in (SparkSink, Sink))
    if commits_first and not own and "committed" not in gaps:
        gaps.append("committed")
    return gaps


def test_the_interface_check_fails_for_a_sink_that_commits_first_without_a_lookup():
    """The check above would pass vacuously if it never found one: a sink that commits before
    Postgres and leaves out `committed` is abstract, cannot be made, and is named."""
    from drainer.sinks.delta import DeltaSink

    class Forgetful(DeltaSink, SparkSink):
        def write(self, spark, ctx, out):
            return None

    assert Forgetful.capabilities.commit == "before_postgres"
    assert _interface_gaps(Forgetful) == ["committed"]
    assert inspect.isabstract(Forgetful)
    with pytest.raises(TypeError, match="committed"):
        Forgetful(SINK_MODELS["delta"].model_validate(EXAMPLES["delta"]), load_settings())

    class Finds(Forgetful):
        def committed(self, spark, ctx):
            return None

    assert _interface_gaps(Finds) == []


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_a_table_formats_commits_count_files_and_others_have_none(kind):
    """`drainer status` shows files for a sink whose commits add them (its table maintenance
    compacts them), and none for one that has none (a Kafka transaction)."""
    caps = SINKS[kind].capabilities
    assert caps.files == caps.table_maintenance


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


ROUTED = {
    "postgres": {"table": "orders_{kind}"},
    "delta": {"type": "delta", "path": "lake/{kind}"},
    "iceberg": {"type": "iceberg", "route": {"by": "kind", "default": "lake.{kind}"}},
}


@pytest.mark.parametrize("kind", sorted(ROUTED))
def test_a_routed_sink_keeps_the_whole_interface_and_its_formats_capabilities(
    kind, tmp_path, monkeypatch
):
    """A template or a route makes the registries hand out the format's routed sink: the
    format's type and capabilities, nothing abstract left, its own `committed`."""
    from drainer.sinks.routed import RoutedSink
    from spark_jobs.sinks import spark_sink_for

    monkeypatch.setenv("DRAINER_WAREHOUSE", str(tmp_path))
    config = SINK_MODELS[kind].model_validate(ROUTED[kind])
    driver, spark = sink_for(config, load_settings(), "d"), spark_sink_for(config, load_settings())
    for sink, base in ((driver, Sink), (spark, SparkSink)):
        assert isinstance(sink, RoutedSink) and isinstance(sink, base)
        assert not inspect.isabstract(type(sink))
        assert sink.type == kind and sink.capabilities == SINKS[kind].capabilities
        assert sink.location() and "kind" in sink.describe()
    assert _interface_gaps(type(spark)) == []
    # one routed table is the format's own sink, as it would be configured for that table
    one = spark.table(
        "lake/x" if kind == "delta" else "lake.x" if kind == "iceberg" else "orders_x"
    )
    assert type(one) is SPARK_SINKS[kind]
