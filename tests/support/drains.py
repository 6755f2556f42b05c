"""Temporary drains for tests, benchmarks and experiments on a live stack, and the `Order`
records (Avro and Protobuf) that the record-format tests and benchmarks drain. Not shipped:
the wheel carries the product only.

`temporary_drain` writes a one-drain YAML file, points DRAINER_CONFIG at it (so the CLI and
Dagster see the drain too), creates its topics, and afterwards deletes the topics again, so a
long-lived local broker does not collect thousands of them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from drainer.config import DrainConfig, load_drains
from drainer.settings import load_settings, use_config_path

# what the test stack's one Connect server loads: a server (re)started with fewer is restarted
# by the next test that needs the rest (`connect.up`), ~30 s each time
STACK_FORMATS = ("delta", "iceberg", "avro")


def drain_body(name: str, **overrides: Any) -> dict[str, Any]:
    """A small valid drain named `name`: 3 levels x 2 partitions, budget 7000, no schedule."""
    body: dict[str, Any] = {
        "topic": name,
        "group": name,
        "levels": 3,
        "partitions": 2,
        "budget": 7000,
        "schedule": None,
        "sink": {"type": "postgres", "table": f"{name}_out"},
    }
    if overrides.get("mode", "dataframe") == "dataframe" and "value" not in overrides:
        # the tests' drains aggregate, as drains did before one without a processor wrote
        # one row per record
        body["processor"] = "spark_jobs.examples:time_buckets"
    body.update(overrides)
    return body


def create_drain(config_dir: Path, prefix: str = "t", **overrides: Any) -> tuple[DrainConfig, Path]:
    """Write a uniquely named one-drain YAML file under `config_dir` and create the topics."""
    from drainer.kafka.session import KafkaSession

    name = overrides.pop("name", None) or f"{prefix}_{uuid.uuid4().hex[:8]}"
    path = Path(config_dir) / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"drains": {name: drain_body(name, **overrides)}}))
    drain = load_drains(path)[name]
    with KafkaSession(drain, load_settings()) as kafka:
        kafka.create_topics([drain.dlq_topic] if drain.dlq_topic else [])
    return drain, path


@contextlib.contextmanager
def temporary_drain(config_dir: Path, prefix: str = "t", **overrides: Any) -> Iterator[DrainConfig]:
    """A uniquely named drain with its topics, current in DRAINER_CONFIG while the block runs."""
    drain, path = create_drain(config_dir, prefix, **overrides)
    with use_config_path(path):
        try:
            yield drain
        finally:
            delete_topics(drain)


def delete_topics(drain: DrainConfig) -> None:
    """Delete a drain's level (and DLQ) topics; already gone or broker down is not an error."""
    from drainer.kafka.session import KafkaSession

    topics = [drain.level_topic(level) for level in range(drain.levels)]
    topics += [drain.dlq_topic] if drain.dlq_topic else []
    with KafkaSession(drain, load_settings()) as kafka:
        for future in kafka.admin.delete_topics(topics, operation_timeout=10).values():
            with contextlib.suppress(Exception):
                future.result(timeout=15)


# ---------------------------------------------------------------- records as data
# The `Order` that the record-format tests and benchmarks/decode_formats.py both drain: one
# definition of its schemas, its values and the typed drain around it.

ORDER_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "qty", "type": "int"},
    ],
}
# a later version with a new optional field (null by default): a compatible evolution
ORDER_AVRO_NOTE: dict[str, Any] = {
    **ORDER_AVRO,
    "fields": [
        *ORDER_AVRO["fields"],
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
ORDER_MESSAGE = "shop.Order"


def order(level: int, partition: int, i: int) -> dict[str, Any]:
    """The i-th order of a (level, partition): its id names where it was produced."""
    return {"id": f"{level}-{partition}-{i}", "amount": i * 1.5, "qty": i}


def avro_bytes(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    import io

    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


# each sink type's setting that names its table, and the name's form
_TABLE_SETTING = {
    "postgres": ("table", "{}"),
    "delta": ("path", "{}"),
    "iceberg": ("table", "drains.{}"),
}


def typed_sink(kind: str, name: str | None = None) -> dict[str, Any]:
    """A fresh sink of `kind` (postgres, delta, iceberg) for typed rows."""
    setting, form = _TABLE_SETTING[kind]
    return {"type": kind, setting: form.format(name or f"orders_{uuid.uuid4().hex[:8]}")}


def typed_drain(value: dict[str, Any] | None, sink: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The overrides of a drain writing one typed row per record: `value` declared and no
    processor (`value` None: the raw records, the value as bytes)."""
    return {"value": value, "processor": None, "sink": sink, **more}


def order_file(version: str, package: str = "shop") -> Any:
    """The `shop.Order` Protobuf file (a `FileDescriptor`, built from `descriptor_pb2`: no
    protoc here) of `version`: `flat` (id, amount, qty), `with_note` (a proto3 `optional`
    string more), `full` (an enum, a nested, a repeated message, a map, a Timestamp),
    `amount_text` (`amount` a string: an incompatible change). Each has a
    second message, `Refund`, so an index array may name another message."""
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2

    fd = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"order_{version}.proto", package=package, syntax="proto3"
    )

    def add(message: Any, name: str, number: int, kind: int, **extra: Any) -> Any:
        field = message.field.add(name=name, number=number, type=kind, label=fd.LABEL_OPTIONAL)
        for key, value in extra.items():
            setattr(field, key, value)
        return field

    order = proto.message_type.add(name="Order")
    add(order, "id", 1, fd.TYPE_STRING)
    # amount_text: `amount` changes type, an incompatible change
    add(order, "amount", 2, fd.TYPE_STRING if version == "amount_text" else fd.TYPE_DOUBLE)
    add(order, "qty", 3, fd.TYPE_INT32)
    if version == "with_note":  # proto3 `optional`: a synthetic oneof gives it presence
        add(order, "note", 4, fd.TYPE_STRING, proto3_optional=True, oneof_index=0)
        order.oneof_decl.add(name="_note")
    if version == "full":
        proto.dependency.append("google/protobuf/timestamp.proto")
        status = proto.enum_type.add(name="Status")
        for number, name in enumerate(["NEW", "PAID", "SHIPPED"]):
            status.value.add(name=name, number=number)
        line = order.nested_type.add(name="Line")
        add(line, "sku", 1, fd.TYPE_STRING)
        add(line, "count", 2, fd.TYPE_INT64)
        tags = order.nested_type.add(name="TagsEntry")
        tags.options.map_entry = True
        add(tags, "key", 1, fd.TYPE_STRING)
        add(tags, "value", 2, fd.TYPE_INT64)
        add(order, "status", 5, fd.TYPE_ENUM, type_name=f".{package}.Status")
        add(order, "first", 6, fd.TYPE_MESSAGE, type_name=f".{package}.Order.Line")
        lines = add(order, "lines", 7, fd.TYPE_MESSAGE, type_name=f".{package}.Order.Line")
        lines.label = fd.LABEL_REPEATED
        tag = add(order, "tags", 8, fd.TYPE_MESSAGE, type_name=f".{package}.Order.TagsEntry")
        tag.label = fd.LABEL_REPEATED
        add(order, "created", 9, fd.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    refund = proto.message_type.add(name="Refund")
    add(refund, "id", 1, fd.TYPE_STRING)
    pool = descriptor_pool.DescriptorPool()
    if version == "full":
        pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return pool.FindFileByName(proto.name)


def order_class(version: str) -> Any:
    from google.protobuf.message_factory import GetMessageClass

    return GetMessageClass(order_file(version).message_types_by_name["Order"])


def write_descriptor_set(path: Path, version: str) -> Path:
    """`version`'s file and its imports as a FileDescriptorSet file at `path`, as
    `protoc --include_imports --descriptor_set_out` writes one."""
    from drainer.records.protobuf import descriptor_set_of

    path.write_bytes(descriptor_set_of(order_file(version)))
    return path


def order_message(version: str, level: int, partition: int, i: int, **extra: Any) -> bytes:
    """`order(level, partition, i)` as a `version` message (`full`: its other fields too)."""
    message = order_class(version)(**order(level, partition, i), **extra)
    if version == "full":
        message.status = i % 3
        message.first.sku, message.first.count = f"sku{i}", i
        message.lines.add(sku="a", count=1)
        message.lines.add(sku="b", count=2)
        message.tags["t"] = i
        message.created.FromSeconds(1_700_000_000 + i)
    return bytes(message.SerializeToString())
