"""Keys in a declared format (json, avro, protobuf) decode like values, into a struct in `_key`.

Read back without Spark (test_record_formats). A key that does not decode is a bad record: the
run fails naming it, or it goes to the dead letters with its raw bytes (reason `key: ...`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from test_exactly_once import drain_until_empty
from test_record_formats import (
    ORDER_DDL,
    PER_LEVEL,
    assert_each_offset_once,
    assert_offsets_unmoved,
    avro_bytes,
    dead_letters_of,
    order,
    rows_of,
    sink_for,
)

from drainer.config import DrainConfig
from drainer.errors import BadRecord
from drainer.kafka.producer import OutRecord
from drainer.settings import load_settings
from spark_jobs import drain_job
from tests.support.drains import order_class, write_descriptor_set
from tests.support.stack import produce_records

KEY_AVRO = {
    "type": "record",
    "name": "OrderKey",
    "fields": [{"name": "customer", "type": "string"}, {"name": "shard", "type": "int"}],
}


def key_of(i: int) -> dict[str, Any]:
    return {"customer": f"c{i % 3}", "shard": i % 3}


def key_format(kind: str, tmp_path) -> tuple[dict[str, Any], Any]:
    """The drain's `key` setting and the encoder of key dicts."""
    if kind == "json":
        return {"format": "json", "schema": "customer string, shard int"}, (
            lambda k: json.dumps(k).encode()
        )
    if kind == "avro":
        avsc = tmp_path / f"key_{uuid.uuid4().hex[:6]}.avsc"
        avsc.write_text(json.dumps(KEY_AVRO))
        return {"format": "avro", "schema": str(avsc)}, (lambda k: avro_bytes(KEY_AVRO, k))

    desc = write_descriptor_set(tmp_path / f"key_{uuid.uuid4().hex[:6]}.desc", "flat")
    cls = order_class("flat")  # shop.Order as a key: id, amount, qty

    def encode(k: dict[str, Any]) -> bytes:
        return bytes(cls(id=k["customer"], qty=k["shard"]).SerializeToString())

    return {"format": "protobuf", "schema": str(desc), "message": "shop.Order"}, encode


def produce(drain: DrainConfig, encode_key, bad_keys: dict[str, bytes] | None = None) -> int:
    total = 0
    for level in range(drain.levels):
        for partition in range(drain.partitions):
            records = [
                OutRecord(
                    value=json.dumps(order(level, partition, i)).encode(),
                    key=encode_key(key_of(i)),
                )
                for i in range(PER_LEVEL)
            ]
            if level == 1 and partition == 0 and bad_keys:
                records += [OutRecord(value=b'{"id": "bad"}', key=k) for k in bad_keys.values()]
            total += produce_records(drain, records, level=level, partition=partition)
    return total


@pytest.mark.parametrize(
    ("kind", "sink"),
    [("json", "delta"), ("avro", "iceberg"), ("avro", "delta"), ("protobuf", "delta")],
)
def test_a_declared_key_decodes_into_a_struct_in_the_key_column(
    lakehouse, make_drain, tmp_path, kind, sink
):
    key, encode_key = key_format(kind, tmp_path)
    drain = make_drain(value={"format": "json", "schema": ORDER_DDL}, key=key, sink=sink_for(sink))
    produced = produce(drain, encode_key)
    drain_until_empty(drain)
    rows = rows_of(drain)
    assert len(rows) == produced
    assert_each_offset_once(drain, rows)
    row = next(r for r in rows if r["id"].endswith("-7"))
    if kind == "protobuf":
        assert (row["_key"]["id"], row["_key"]["qty"]) == ("c1", 1)
    else:
        assert row["_key"] == {"customer": "c1", "shard": 1}
    assert row["amount"] == 7 * 1.5


def test_a_key_that_does_not_decode_goes_to_the_dead_letters_and_the_rest_is_written(
    lakehouse, make_drain, tmp_path
):
    key, encode_key = key_format("json", tmp_path)
    drain = make_drain(
        value={"format": "json", "schema": ORDER_DDL},
        key=key,
        sink=sink_for("delta"),
        bad_records="dead_letter",
    )
    bad = {"malformed": b'{"customer": ', "not_json": b"\xff"}
    total = produce(drain, encode_key, bad)
    drain_until_empty(drain)
    rows, dead = rows_of(drain), dead_letters_of(drain)
    assert len(rows) + len(dead) == total  # nothing lost
    assert_each_offset_once(drain, rows, dead)
    assert sorted(bytes(d["key"]) for d in dead) == sorted(bad.values())
    assert all(
        d["error"] == "undecodable: key: malformed JSON: the key is not a JSON object" for d in dead
    )


def test_a_key_that_does_not_decode_fails_the_run_naming_it(lakehouse, make_drain, tmp_path):
    key, encode_key = key_format("avro", tmp_path)
    drain = make_drain(
        value={"format": "json", "schema": ORDER_DDL}, key=key, sink=sink_for("delta")
    )
    produce(drain, encode_key, {"cut": avro_bytes(KEY_AVRO, key_of(1))[:2]})
    with pytest.raises(BadRecord, match=rf"{drain.level_topic(1)}\[0\]@{PER_LEVEL}.*key: "):
        drain_job.run(drain.name, trigger="test", settings=load_settings())
    assert_offsets_unmoved(drain)
