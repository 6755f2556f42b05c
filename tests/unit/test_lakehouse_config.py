"""Lakehouse sinks in the drains file: each type takes its own fields, secrets stay unprinted."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from drainer.config import ConfigError, load_drains
from drainer.settings import load_settings
from drainer.sinks import server_conf, sink_for, spark_formats
from drainer.sinks.base import warehouse_uri

BASE = {"topic": "orders", "group": "billing", "levels": 3, "budget": 70}


def load(tmp_path, sink):
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": {"orders": {**BASE, "sink": sink}}}))
    return load_drains(path)["orders"]


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        ({"type": "delta", "path": "x", "publish": "copy"}, "publish cannot be used with a delta"),
        ({"type": "delta", "table": "t", "path": "x"}, "table cannot be used with a delta"),
        ({"type": "delta"}, "a delta sink needs `path:`"),
        ({"type": "iceberg", "table": "plain"}, "namespace.table"),
        ({"type": "iceberg", "table": "a.b", "publish": "attach"}, "publish cannot be used"),
        ({"type": "iceberg", "table": "a.b", "path": "p"}, "path cannot be used"),
        ({"type": "postgres", "table": "t", "catalog": {"uri": "u"}}, "catalog cannot be used"),
        ({"type": "postgres"}, "needs `table: <name>`"),
        ({"type": "hudi", "table": "t"}, "sink.type"),
        ({"type": "iceberg", "table": "a.b", "catalog": {"name": "bad-name"}}, "catalog.name"),
    ],
)
def test_each_sink_type_takes_its_own_fields(tmp_path, sink, message):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, sink)
    assert message in str(info.value)


def test_delta_paths_relative_to_the_warehouse(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAINER_WAREHOUSE", str(tmp_path / "wh"))
    settings = load_settings()

    def delta_location(settings, sink):
        return sink_for(sink, settings).location()

    relative = load(tmp_path, {"type": "delta", "path": "events/buckets"}).sink
    assert delta_location(settings, relative) == str(tmp_path / "wh" / "events" / "buckets")
    absolute = load(tmp_path, {"type": "delta", "path": "/data/lake/e"}).sink
    assert delta_location(settings, absolute) == "/data/lake/e"
    uri = load(tmp_path, {"type": "delta", "path": "s3a://bucket/lake/e/"}).sink
    assert delta_location(settings, uri) == "s3a://bucket/lake/e"
    on_s3 = replace(settings, warehouse="s3a://bucket/wh")
    assert delta_location(on_s3, relative) == "s3a://bucket/wh/events/buckets"
    assert warehouse_uri(settings) == (tmp_path / "wh").as_uri()


def test_default_warehouse_is_in_the_drainer_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DRAINER_WAREHOUSE", raising=False)
    monkeypatch.setenv("DRAINER_HOME", str(tmp_path))
    assert load_settings().warehouse == str(tmp_path / "warehouse")


def test_embedded_iceberg_catalog_lives_in_the_drainer_postgres(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://me:pw@db.example:6543/state")
    monkeypatch.setenv("DRAINER_WAREHOUSE", str(tmp_path))
    drain = load(tmp_path, {"type": "iceberg", "table": "drains.events"})
    conf = sink_for(drain.sink, load_settings()).catalog_conf()
    assert conf == {
        "spark.sql.catalog.drainer": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.drainer.type": "jdbc",
        "spark.sql.catalog.drainer.uri": "jdbc:postgresql://db.example:6543/state",
        "spark.sql.catalog.drainer.jdbc.user": "me",
        "spark.sql.catalog.drainer.jdbc.password": "pw",
        "spark.sql.catalog.drainer.warehouse": tmp_path.as_uri(),
        "spark.sql.catalog.drainer.jdbc.schema-version": "V1",
        "spark.sql.catalog.drainer.cache-enabled": "false",
    }


def test_catalog_block_passes_properties_and_expands_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("CATALOG_TOKEN", "s3cr3t-token")
    sink = {
        "type": "iceberg",
        "table": "prod.events",
        "catalog": {
            "name": "lake",
            "uri": "https://catalog.example",
            "warehouse": "s3://bucket/wh",
            "token": "${CATALOG_TOKEN}",
            "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        },
    }
    drain = load(tmp_path, sink)
    assert "s3cr3t" not in repr(drain) and "CATALOG_TOKEN" not in repr(drain)
    conf = sink_for(drain.sink, load_settings()).catalog_conf()
    assert conf == {
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.type": "rest",
        "spark.sql.catalog.lake.uri": "https://catalog.example",
        "spark.sql.catalog.lake.warehouse": "s3://bucket/wh",
        "spark.sql.catalog.lake.token": "s3cr3t-token",
        "spark.sql.catalog.lake.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "spark.sql.catalog.lake.cache-enabled": "false",
    }
    monkeypatch.delenv("CATALOG_TOKEN")
    with pytest.raises(ConfigError, match="sink.catalog.token references .* CATALOG_TOKEN"):
        sink_for(drain.sink, load_settings()).catalog_conf()


def test_server_loads_only_the_formats_the_drains_use(tmp_path):
    delta = load(tmp_path, {"type": "delta", "path": "x"})
    postgres = load(tmp_path, {"table": "out"})
    assert spark_formats([postgres]) == ()
    assert server_conf(()) == {}
    assert spark_formats([delta, postgres]) == ("delta",)
    conf = server_conf(("delta", "iceberg"))
    assert conf["spark.sql.extensions"] == (
        "io.delta.sql.DeltaSparkSessionExtension,"
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    )
    assert "spark_catalog" in "".join(conf)
    assert "spark.sql.catalog.spark_catalog" not in server_conf(("iceberg",))


def test_an_unwritable_delta_path_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAINER_WAREHOUSE", str(tmp_path))
    settings = load_settings()

    def check_writable(sink):
        sink_for(sink, settings).check_writable()

    check_writable(load(tmp_path, {"type": "delta", "path": "a/b/c"}).sink)
    (tmp_path / "file").write_text("not a folder")
    sink = load(tmp_path, {"type": "delta", "path": "file/table"}).sink
    with pytest.raises(ConfigError, match="sink.path 'file/table': .* is not a folder this user"):
        check_writable(sink)
    check_writable(load(tmp_path, {"type": "delta", "path": "s3a://b/t"}).sink)
