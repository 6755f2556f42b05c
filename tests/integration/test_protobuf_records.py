"""Protobuf records on the real stack: decoded in the Spark tasks in Arrow batches.

Descriptor sets are built from `descriptor_pb2` (proto_orders; no protoc on these machines).
The Confluent wire format uses confluent-kafka's in-process registry (`mock://`), shared by the
test's producer and the run's driver. Sinks are read back without Spark (test_record_formats).
"""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_exactly_once import drain_until_empty
from test_record_formats import (
    PER_LEVEL,
    assert_each_offset_once,
    assert_no_table_commit,
    assert_offsets_unmoved,
    assert_run_fails_naming,
    dead_letters_of,
    produce_orders,
    produce_with_bad,
    rows_of,
    sink_for,
)

from dagster_project.metadata import run_metadata
from drainer.cli.main import main as drainer_cli
from drainer.config import DrainConfig
from drainer.config.formats import RegistryConfig
from drainer.errors import ConfigError
from drainer.kafka.producer import OutRecord
from drainer.observe.status import drain_status
from drainer.records.protobuf import register_protobuf, wire_frame
from drainer.settings import load_settings
from spark_jobs import drain_job
from tests.support.drains import order_class, order_file, order_message, write_descriptor_set
from tests.support.stack import produce_records

MESSAGE = "shop.Order"


def encode(version: str):
    """`produce_orders`'s encoder: the order's numbers as a `version` message."""

    def one(order: dict[str, Any]) -> bytes:
        level, partition, i = (int(part) for part in order["id"].split("-"))
        return order_message(version, level, partition, i)

    return one


def framed(schema_id: int, version: str, indexes: list[int] | None = None, **extra: Any):
    def one(order: dict[str, Any]) -> bytes:
        level, partition, i = (int(part) for part in order["id"].split("-"))
        return wire_frame(
            schema_id, indexes or [0], order_message(version, level, partition, i, **extra)
        )

    return one


def file_drain(make_drain, tmp_path: Path, kind: str, version: str, **extra: Any) -> DrainConfig:
    desc = write_descriptor_set(tmp_path / f"order_{uuid.uuid4().hex[:6]}.desc", version)
    return make_drain(
        value={"format": "protobuf", "schema": str(desc), "message": MESSAGE},
        key={"format": "string"},
        sink=sink_for(kind),
        **extra,
    )


def registry_drain(make_drain, kind: str, **extra: Any) -> tuple[DrainConfig, RegistryConfig]:
    registry = {"url": f"mock://drainer-pb-{uuid.uuid4().hex[:8]}"}
    drain = make_drain(
        value={"format": "protobuf", "registry": registry, "message": MESSAGE},
        key={"format": "string"},
        sink=sink_for(kind),
        **extra,
    )
    assert drain.value is not None and drain.value.registry is not None
    return drain, drain.value.registry


def assert_typed(rows: list[dict[str, Any]], full: bool) -> None:
    row = next(r for r in rows if r["id"].endswith("-7"))
    assert (row["amount"], row["qty"]) == (7 * 1.5, 7)
    assert isinstance(row["qty"], int) and row["_key"] == "k1"
    if full:
        assert row["status"] == "PAID"  # 7 % 3: enums as their names
        assert row["first"] == {"sku": "sku7", "count": 7}
        assert [line["sku"] for line in row["lines"]] == ["a", "b"]
        assert dict(row["tags"]) == {"t": 7}
        created = row["created"]
        assert created.replace(tzinfo=created.tzinfo or datetime.UTC) == datetime.datetime(
            2023, 11, 14, 22, 13, 27, tzinfo=datetime.UTC
        )


# Postgres stores flat rows (no struct/array/map columns); the lakehouse formats the full message
@pytest.mark.parametrize(
    ("kind", "version"), [("postgres", "flat"), ("delta", "full"), ("iceberg", "full")]
)
def test_protobuf_values_from_a_descriptor_set_become_typed_rows_in_each_sink(
    lakehouse, make_drain, tmp_path, kind, version
):
    drain = file_drain(make_drain, tmp_path, kind, version)
    produced = produce_orders(drain, encode(version))
    drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == produced
    assert_each_offset_once(drain, rows)
    assert_typed(rows, full=version == "full")


@pytest.mark.parametrize(
    ("kind", "version"), [("postgres", "flat"), ("delta", "full"), ("iceberg", "full")]
)
def test_protobuf_wire_format_decodes_with_the_registry_writer_schema_in_each_sink(
    lakehouse, make_drain, kind, version
):
    drain, registry = registry_drain(make_drain, kind)
    v1 = register_protobuf(registry, f"{drain.topic}-value", order_file(version))
    produced = produce_orders(drain, framed(v1, version))
    drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == produced
    assert_each_offset_once(drain, rows)
    assert_typed(rows, full=version == "full")


@pytest.mark.parametrize("kind", ["postgres", "delta", "iceberg"])
def test_a_new_optional_protobuf_field_mid_backlog_adds_a_column_null_in_older_rows(
    lakehouse, make_drain, kind, capsys
):
    drain, registry = registry_drain(make_drain, kind)
    v1 = register_protobuf(registry, f"{drain.topic}-value", order_file("flat"))
    v2 = register_protobuf(registry, f"{drain.topic}-value", order_file("with_note"))
    older = produce_orders(drain, framed(v1, "flat"))
    drain_until_empty(drain)
    assert "note" not in rows_of(drain)[0]
    newer = produce_orders(drain, framed(v2, "with_note", note="n"))
    mixed = produce_orders(drain, framed(v1, "flat"))  # v1 after v2 within one run
    results = drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == older + newer + mixed
    assert_each_offset_once(drain, rows)
    assert Counter(r["note"] for r in rows) == {None: older + mixed, "n": newer}
    # the addition is audited with the run that made it: its result, Dagster, status
    adding = [r for r in results if r.columns_added]
    assert [r.columns_added for r in adding] == [["note"]]
    metadata = run_metadata(adding[0])
    assert metadata["run_columns_added_names"].value == "note"
    assert metadata["run_columns_added"].value == 1
    runs = {r["id"]: r for r in drain_status(drain, load_settings())["runs"]}
    assert runs[adding[0].run_id]["columns_added"] == ["note"]
    assert all(r["columns_added"] == [] for i, r in runs.items() if i != adding[0].run_id)
    capsys.readouterr()
    assert drainer_cli(["status", drain.name]) == 0
    assert f"run {adding[0].run_id}: columns added: note" in capsys.readouterr().out


def bad_values(v1: int) -> dict[str, bytes]:
    good = order_message("flat", 0, 0, 1)
    return {
        "truncated": b"\x00\x00",
        "wrong_magic": b"\x07" + b"\x00\x00\x00\x01" + b"\x00zz",
        "unknown_id": wire_frame(987_654, [0], good),
        "short_payload": wire_frame(v1, [0], good[:4]),  # cut inside the id string
        "other_message": wire_frame(v1, [1], b"\x0a\x01x"),  # a shop.Refund
        "bad_indexes": wire_frame(v1, [0], b"")[:5] + b"\x06\x00",  # 3 indexes, 1 given
    }


def test_a_bad_protobuf_record_fails_the_run_naming_it_with_nothing_committed(
    lakehouse, make_drain
):
    drain, registry = registry_drain(make_drain, "delta")
    v1 = register_protobuf(registry, f"{drain.topic}-value", order_file("flat"))
    _, offsets = produce_with_bad(
        drain, framed(v1, "flat"), {"short": bad_values(v1)["short_payload"]}
    )
    assert_run_fails_naming(drain, offsets["short"], "does not decode as shop.Order")


@pytest.mark.parametrize("kind", ["postgres", "delta"])
def test_bad_protobuf_records_of_every_kind_go_to_the_dead_letters_nothing_lost(
    lakehouse, make_drain, kind
):
    drain, registry = registry_drain(make_drain, kind, bad_records="dead_letter")
    v1 = register_protobuf(registry, f"{drain.topic}-value", order_file("flat"))
    bad = bad_values(v1)
    total, offsets = produce_with_bad(drain, framed(v1, "flat"), bad)
    drain_until_empty(drain)
    rows, dead = rows_of(drain), dead_letters_of(drain)
    assert len(rows) + len(dead) == total  # nothing lost, by distinct offsets
    assert_each_offset_once(drain, rows, dead)
    by_offset = {d["offset"]: d for d in dead}
    assert set(by_offset) == set(offsets.values())
    reasons = {}
    for name, offset in offsets.items():
        letter = by_offset[offset]
        assert bytes(letter["value"]) == bad[name] and bytes(letter["key"]) == name.encode()
        reasons[name] = letter["error"]
    assert "truncated: 2 bytes" in reasons["truncated"]
    assert "wrong magic byte 0x07" in reasons["wrong_magic"]
    assert "unknown schema id 987654" in reasons["unknown_id"]
    assert "does not decode as shop.Order" in reasons["short_payload"]
    assert "is shop.Refund" in reasons["other_message"]
    assert "message indexes are cut short" in reasons["bad_indexes"]


def test_drainer_produce_writes_protobuf_from_a_descriptor_set(lakehouse, make_drain, tmp_path):
    desc = write_descriptor_set(tmp_path / "order.desc", "full")
    drain = file_drain(make_drain, tmp_path, "delta", "full")
    sent = drainer_cli(
        ["produce", drain.name, "--count", str(PER_LEVEL), "--format", "protobuf"]
        + ["--schema", str(desc), "--message", MESSAGE]
    )
    assert sent == 0
    drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == PER_LEVEL
    assert {r["id"] for r in rows} == {f"id-{n}" for n in range(PER_LEVEL)}
    assert {r["qty"] for r in rows} == set(range(PER_LEVEL)) and rows[0]["lines"] == []


def test_drainer_produce_writes_protobuf_in_the_wire_format_through_a_registry(
    lakehouse, make_drain, tmp_path
):
    desc = write_descriptor_set(tmp_path / "order.desc", "flat")
    drain, registry = registry_drain(make_drain, "postgres")
    args = ["produce", drain.name, "--count", str(PER_LEVEL), "--format", "protobuf"]
    args += ["--schema", str(desc), "--message", MESSAGE, "--registry", registry.url]
    assert drainer_cli(args) == 0  # registers the file under <topic>-value, in this process
    drain_until_empty(drain)
    assert sorted(r["qty"] for r in rows_of(drain)) == list(range(PER_LEVEL))


def test_an_incompatible_protobuf_change_stops_the_run_naming_the_field(lakehouse, make_drain):
    drain, registry = registry_drain(make_drain, "delta")
    v1 = register_protobuf(registry, f"{drain.topic}-value", order_file("flat"))
    v3 = register_protobuf(registry, f"{drain.topic}-other", order_file("amount_text"))
    produce_orders(drain, framed(v1, "flat"))
    changed = order_class("amount_text")(id="x", amount="lots", qty=1).SerializeToString()
    produce_records(drain, [OutRecord(value=wire_frame(v3, [0], changed))], 1, None, 0)
    with pytest.raises(ConfigError, match="field amount is double in writer schema") as err:
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert "\n" not in str(err.value)
    assert_offsets_unmoved(drain)
    assert_no_table_commit(drain)
