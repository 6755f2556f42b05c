"""State tables' pure rules (issue 48): the settings, and the merge condition every format runs.

The condition is SQL text shared by Spark SQL and Postgres; here it runs in SQLite, whose
comparison and NULL rules are the same, against the rule it implements, over random versions.
"""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from drainer.config.sink_models import SinkConfig
from drainer.errors import ConfigError
from drainer.sinks.upsert import (
    DEFAULT_ORDER,
    UpsertSpec,
    check_columns,
    check_key_unchanged,
    kept_order,
    newer,
    upsert_spec,
)

SINK: TypeAdapter = TypeAdapter(SinkConfig)


def dq(name: str) -> str:
    return '"' + name + '"'


def test_upsert_defaults_key_and_order():
    config = SINK.validate_python({"type": "delta", "path": "x", "write": "upsert"})
    spec = upsert_spec(config)
    assert spec is not None
    assert spec.keys == ("_key",) and spec.order == DEFAULT_ORDER
    assert spec.retention_ms == 7 * 86_400_000
    assert upsert_spec(SINK.validate_python({"type": "delta", "path": "x"})) is None


@pytest.mark.parametrize(
    "body,words",
    [
        ({"primary_key": ["id"]}, "only apply to `write: upsert`"),
        ({"write": "upsert", "primary_key": []}, "at least one column"),
        ({"write": "upsert", "order_by": ["a b"]}, "is not a column name"),
        ({"write": "upsert", "order_by": ["v", "v"]}, "names a column twice"),
        ({"write": "upsert", "delete_retention": "soon"}, "not a duration"),
        ({"write": "merge"}, "'append' or 'upsert'"),
    ],
)
def test_bad_upsert_settings_say_what_to_do(body, words):
    with pytest.raises(ValidationError, match=words):
        SINK.validate_python({"type": "postgres", "table": "t", **body})


def test_kafka_sink_upserts_by_its_output_key():
    config = SINK.validate_python({"type": "kafka", "topic": "t", "write": "upsert"})
    spec = upsert_spec(config)
    assert spec is not None and spec.keys == ("key",) and spec.order == DEFAULT_ORDER
    assert upsert_spec(SINK.validate_python({"type": "kafka", "topic": "t"})) is None
    ordered = SINK.validate_python(
        {"type": "kafka", "topic": "t", "write": "upsert", "order_by": ["v"], "delete_when": "d"}
    )
    assert upsert_spec(ordered) == UpsertSpec(("key",), ("v",), "d", 0)


@pytest.mark.parametrize(
    "body,words",
    [
        ({"order_by": ["v"]}, "only apply to `write: upsert`"),
        ({"write": "upsert", "order_by": ["v", "v"]}, "names a column twice"),
        # the compacted topic keys by the record key, and its own delete.retention.ms keeps
        # tombstones: neither is the sink's to set
        ({"write": "upsert", "primary_key": ["id"]}, "cannot be used with a kafka sink"),
        ({"write": "upsert", "delete_retention": "1d"}, "cannot be used with a kafka sink"),
    ],
)
def test_bad_kafka_upsert_settings_say_what_to_do(body, words):
    with pytest.raises(ValidationError, match=words):
        SINK.validate_python({"type": "kafka", "topic": "t", **body})


def test_a_changed_primary_key_is_one_line():
    spec = UpsertSpec(("id",), ("v",), None, 1)
    check_key_unchanged("t", ["id"], spec)
    with pytest.raises(ConfigError, match=r"was made with primary key \[_key\]") as err:
        check_key_unchanged("t", ["_key"], spec)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="made by `write: append`"):
        check_key_unchanged("t", None, spec)


def test_missing_key_or_order_column_is_named():
    spec = UpsertSpec(("id",), ("updated_at",), None, 1)
    with pytest.raises(ConfigError, match="sink.order_by names updated_at"):
        check_columns(spec, ["id", "v"], "t")
    with pytest.raises(ConfigError, match="_deleted_at"):
        check_columns(UpsertSpec(("id",), ("v",), None, 1), ["id", "v", "_deleted_at"], "t")


def _rule(src: tuple, dst: tuple) -> bool:
    """The rule the condition implements: null order (all columns) newest in the source,
    oldest in the table, else left-to-right comparison."""
    if all(v is None for v in src) or all(v is None for v in dst):
        return True
    for s, d in zip(src, dst, strict=True):
        if s is None or d is None:
            return False  # SQL: an unknown comparison is not newer
        if s != d:
            return s > d
    return False


versions = st.tuples(st.none() | st.integers(0, 3), st.none() | st.integers(0, 3))


@given(src=versions, dst=versions)
def test_newer_is_the_rule_in_sql(src, dst):
    order = ("a", "b")
    db = sqlite3.connect(":memory:")
    db.execute('CREATE TABLE s ("a", "b")')
    db.execute('CREATE TABLE t ("a", "b")')
    db.execute("INSERT INTO s VALUES (?, ?)", src)
    db.execute("INSERT INTO t VALUES (?, ?)", dst)
    condition = newer("s", "t", order, dq)
    kept = ", ".join(kept_order("s", "t", c, order, dq) for c in order)
    row = db.execute(f"SELECT coalesce({condition}, 0), {kept} FROM s, t").fetchone()
    assert bool(row[0]) == _rule(src, dst)
    # a source without order values keeps the table's (a tombstone keeps what it deleted)
    assert tuple(row[1:]) == (dst if all(v is None for v in src) else src)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), min_size=1, max_size=12))
def test_merging_in_any_order_ends_at_the_newest(versions_):
    """Versions (v, level) of one key merged one by one in any order leave the newest: the
    condition makes the result independent of the drain order across runs."""
    order = ("v", "level")
    db = sqlite3.connect(":memory:")
    db.execute('CREATE TABLE t ("v", "level")')
    db.execute('CREATE TABLE s ("v", "level")')
    for v, level in versions_:
        db.execute("DELETE FROM s")
        db.execute("INSERT INTO s VALUES (?, ?)", (v, level))
        if db.execute("SELECT count(*) FROM t").fetchone()[0] == 0:
            db.execute("INSERT INTO t SELECT * FROM s")
            continue
        db.execute(
            f'UPDATE t SET "v" = (SELECT "v" FROM s), "level" = (SELECT "level" FROM s) '
            f"WHERE (SELECT coalesce({newer('s', 't', order, dq)}, 0) FROM s)"
        )
    assert db.execute("SELECT v, level FROM t").fetchone() == max(versions_)


def test_debezium_defaults_order_and_deletes(tmp_path):
    from drainer.config import load_drains

    path = tmp_path / "drains.yaml"
    path.write_text(
        "drains:\n  cdc:\n    topic: cdc\n    group: cdc\n    levels: 1\n    budget: 10\n"
        "    value: {format: json, schema: 'id long', envelope: debezium}\n"
        "    sink: {type: delta, path: cdc, write: upsert}\n"
    )
    sink = load_drains(path)["cdc"].sink
    assert sink.order_by == ["_source_ts_ms", "_source_lsn"]
    assert sink.delete_when == "_op = 'd'"


def test_envelope_is_for_json_and_avro():
    from drainer.config.formats import RecordFormat

    with pytest.raises(ValidationError, match="envelope: debezium` is for format 'json' or 'avro'"):
        RecordFormat(format="string", envelope="debezium")
    assert RecordFormat(format="avro", schema="e.avsc", envelope="debezium").envelope
