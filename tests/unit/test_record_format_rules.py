"""Declared record formats: what the drains file accepts, what it refuses and says why."""

from __future__ import annotations

import json

import pytest
import yaml

from drainer.config import ConfigError, load_drains
from drainer.config.formats import RecordFormat
from drainer.records.json_schema import ddl_of_file
from drainer.records.registry import frame, register, registry_client, writer_schemas
from drainer.sinks import format_jars, server_conf, spark_formats

BASE = {"topic": "orders", "group": "billing", "levels": 3, "budget": 70, "sink": {"table": "out"}}
ORDER_AVSC = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"}],
}


def load(tmp_path, **overrides):
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": {"orders": {**BASE, **overrides}}}))
    return load_drains(path)["orders"]


def test_a_drain_without_processor_or_value_writes_raw_rows_and_fails_on_bad_records(tmp_path):
    drain = load(tmp_path)
    assert drain.processor is None and drain.value is None and drain.bad_records == "fail"


def test_json_value_takes_a_ddl_string_and_dead_letters_when_asked(tmp_path):
    drain = load(
        tmp_path,
        value={"format": "json", "schema": "id string, amount double"},
        key={"format": "string"},
        bad_records="dead_letter",
    )
    assert drain.value is not None and drain.value.schema_ == "id string, amount double"
    assert drain.key is not None and drain.key.format == "string"
    assert drain.bad_records == "dead_letter"


def test_a_schema_file_is_found_relative_to_the_drains_file(tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "order.avsc").write_text(json.dumps(ORDER_AVSC))
    drain = load(tmp_path, value={"format": "avro", "schema": "schemas/order.avsc"})
    assert drain.value is not None
    assert drain.value.schema_ == str((tmp_path / "schemas" / "order.avsc").resolve())


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"value": {"format": "json"}}, "format 'json' needs `schema`"),
        ({"value": {"format": "avro"}}, "format 'avro' needs `schema: file.avsc`"),
        ({"value": {"format": "avro", "schema": "missing.avsc"}}, "missing.avsc not found"),
        ({"value": {"format": "protobuf", "message": "a.B"}}, "needs `message: pkg.Name` and"),
        ({"value": {"format": "protobuf", "schema": "o.desc"}}, "needs `message: pkg.Name` and"),
        (
            {"value": {"format": "protobuf", "schema": "missing.desc", "message": "a.B"}},
            "missing.desc not found",
        ),
        ({"value": {"format": "avro", "schema": "x.avsc", "message": "a.B"}}, "`message` is for"),
        ({"value": {"format": "xml"}}, "orders.value.format"),
        ({"value": {"format": "string", "schema": "x string"}}, "takes no `schema`"),
        (
            {
                "mode": "record",
                "handler": "m:f",
                "output_schema": "a string",
                "key": {"format": "json", "schema": "x string"},
            },
            "handler gets the raw key",
        ),
        ({"bad_records": "skip"}, "orders.bad_records"),
        (
            {
                "mode": "record",
                "handler": "m:f",
                "output_schema": "a string",
                "value": {"format": "string"},
            },
            "record mode's handler gets the raw record",
        ),
    ],
)
def test_a_wrong_format_setting_is_refused_with_its_fix(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, **overrides)


def test_json_schema_file_becomes_spark_ddl(tmp_path):
    path = tmp_path / "order.json"
    path.write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "amount": {"type": ["number", "null"]},
                    "qty": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "ship": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        )
    )
    assert ddl_of_file(path) == (
        "`id` string, `amount` double, `qty` bigint, `tags` array<string>, "
        "`ship` struct<`city` string>"
    )


def test_json_schema_dates_are_typed_and_required_fields_not_null(tmp_path):
    """Before: `"format": "date-time"` became a string column and `required` fields stayed
    nullable."""
    path = tmp_path / "event.json"
    path.write_text(
        json.dumps(
            {
                "type": "object",
                "required": ["id", "at"],
                "properties": {
                    "id": {"type": "integer"},
                    "at": {"type": "string", "format": "date-time"},
                    "day": {"type": ["string", "null"], "format": "date"},
                    "mail": {"type": "string", "format": "email"},
                },
            }
        )
    )
    assert ddl_of_file(path) == (
        "`id` bigint NOT NULL, `at` timestamp NOT NULL, `day` date, `mail` string"
    )
    path.write_text(
        json.dumps(
            {"type": "object", "required": ["idd"], "properties": {"id": {"type": "string"}}}
        )
    )
    with pytest.raises(ConfigError, match=r"`required` names idd, which `properties` does not"):
        ddl_of_file(path)


def test_spark_avro_jar_is_resolved_only_when_a_drain_declares_avro(tmp_path):
    (tmp_path / "o.avsc").write_text(json.dumps(ORDER_AVSC))
    plain = load(tmp_path)
    avro = load(tmp_path, value={"format": "avro", "schema": str(tmp_path / "o.avsc")})
    assert spark_formats([plain]) == ()
    assert spark_formats([avro]) == ("avro",)
    assert format_jars(("avro",)) == {"avro-4.1.1": ("org.apache.spark:spark-avro_2.13:4.1.1",)}
    assert server_conf(("avro",)) == {}


def test_the_mock_registry_serves_each_writer_schema_by_id_and_knows_no_other():
    registry = RecordFormat.model_validate(
        {"format": "avro", "registry": {"url": "mock://unit-formats"}}
    ).registry
    assert registry is not None
    first = register(registry, "orders-0-value", json.dumps(ORDER_AVSC))
    assert registry_client(registry) is registry_client(registry)  # one client per URL
    found = writer_schemas(registry, [first, 999_999])
    assert json.loads(found[first] or "")["name"] == "Order" and found[999_999] is None
    assert frame(first, b"xy") == b"\x00" + first.to_bytes(4, "big") + b"xy"


def test_produce_encodes_synthetic_avro_that_reads_back_with_its_schema(tmp_path):
    import io

    import fastavro

    from drainer.records.encode import encoder, synthetic_values

    avsc = tmp_path / "order.avsc"
    schema = {
        **ORDER_AVSC,
        "fields": [*ORDER_AVSC["fields"], {"name": "note", "type": ["null", "string"]}],
    }
    avsc.write_text(json.dumps(schema))
    fmt = RecordFormat.model_validate({"format": "avro", "schema": str(avsc)})
    encode, fields = encoder(fmt, "orders-0")
    assert fields == [("id", "string"), ("amount", "double"), ("note", "string")]
    values = list(synthetic_values(fields, 3, seed=10))
    decoded = [
        fastavro.schemaless_reader(io.BytesIO(encode(v)), fastavro.parse_schema(schema))
        for v in values
    ]
    assert decoded[2] == {"id": "id-12", "amount": 18.0, "note": "note-12"}


def test_produce_encodes_synthetic_json_following_a_ddl_schema():
    from drainer.records.encode import encoder, synthetic_values

    fmt = RecordFormat.model_validate(
        {"format": "json", "schema": "seq bigint, key string, ok boolean"}
    )
    encode, fields = encoder(fmt, "orders-0")
    [value] = synthetic_values(fields, 1, seed=4)
    assert json.loads(encode(value)) == {"seq": 4, "key": "key-4", "ok": True}


def test_produce_in_the_wire_format_registers_the_schema_and_frames_each_value(tmp_path):
    from drainer.records.encode import encoder

    avsc = tmp_path / "order.avsc"
    avsc.write_text(json.dumps(ORDER_AVSC))
    fmt = RecordFormat.model_validate(
        {"format": "avro", "schema": str(avsc), "registry": {"url": "mock://unit-produce"}}
    )
    encode, _ = encoder(fmt, "orders-1")
    framed = encode({"id": "a", "amount": 1.0})
    assert fmt.registry is not None
    schema_id = registry_client(fmt.registry).get_latest_version("orders-1-value").schema_id
    assert framed[:5] == b"\x00" + schema_id.to_bytes(4, "big")


def test_a_bad_record_line_ends_with_its_reason_not_sparks_sql_state():
    """Before: the fail line ended with a stray `SQLSTATE: P0001` (raise_error's SQL state)."""
    from spark_jobs.bad_records import known_bad_record

    spark_said = (
        "[USER_RAISED_EXCEPTION] drainer bad record orders-1[0]@5: malformed JSON: the value "
        "is not a JSON object SQLSTATE: P0001\nJVM stacktrace: ..."
    )
    err = known_bad_record(RuntimeError(spark_said), "orders", 4)
    assert err is not None
    assert "(malformed JSON: the value is not a JSON object); run 4" in str(err)
    assert "SQLSTATE" not in str(err)


def test_an_untold_json_reason_is_read_again_for_the_bad_record_line():
    """The run's job leaves a JSON record's reason untold (`decode.QUICK_ERROR`, kept in
    generated code); the line asks for the record's own reason, and keeps the untold one
    when it cannot be read."""
    from spark_jobs.bad_records import known_bad_record
    from spark_jobs.decode_errors import UNTOLD

    spark_said = (
        f"[USER_RAISED_EXCEPTION] drainer bad record orders-1[2]@7: {UNTOLD} the value "
        "SQLSTATE: P0001\nJVM stacktrace: ..."
    )
    asked: list[tuple[str, int, int]] = []

    def reason_of(topic: str, partition: int, offset: int) -> str:
        asked.append((topic, partition, offset))
        return "the value's JSON does not fit its schema: qty = two is not int"

    told = known_bad_record(RuntimeError(spark_said), "orders", 4, reason_of)
    assert asked == [("orders-1", 2, 7)]
    assert "(the value's JSON does not fit its schema: qty = two is not int); run 4" in str(told)

    def gone(topic: str, partition: int, offset: int) -> str:
        raise RuntimeError("the broker is down")

    untold = known_bad_record(RuntimeError(spark_said), "orders", 4, gone)
    assert f"({UNTOLD} the value); run 4" in str(untold)
