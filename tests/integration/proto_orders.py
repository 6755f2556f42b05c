"""Protobuf `Order` messages for the tests, built from `descriptor_pb2` (no protoc here).

`flat` holds scalars only (what a Postgres table stores); `full` adds an enum, a nested message,
a repeated message, a map and a `google.protobuf.Timestamp`. `with_note` is a later version
with a new optional field. Each is a `FileDescriptorSet` file as `protoc --include_imports
--descriptor_set_out` writes it, and a message class to encode test values with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
from google.protobuf.message_factory import GetMessageClass

from drainer.records.protobuf import descriptor_set_of

FD = descriptor_pb2.FieldDescriptorProto
OPTIONAL, REPEATED = FD.LABEL_OPTIONAL, FD.LABEL_REPEATED


def _field(message: Any, name: str, number: int, kind: int, **extra: Any) -> Any:
    field = message.field.add(name=name, number=number, type=kind, label=OPTIONAL)
    for key, value in extra.items():
        setattr(field, key, value)
    return field


def order_file(version: str, package: str = "shop") -> Any:
    """The `shop.Order` file of `version`: flat, full or with_note (module docstring)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"order_{version}.proto", package=package, syntax="proto3"
    )
    order = proto.message_type.add(name="Order")
    _field(order, "id", 1, FD.TYPE_STRING)
    _field(order, "amount", 2, FD.TYPE_DOUBLE)
    _field(order, "qty", 3, FD.TYPE_INT32)
    if version == "with_note":  # proto3 `optional`: a synthetic oneof gives it presence
        _field(order, "note", 4, FD.TYPE_STRING, proto3_optional=True, oneof_index=0)
        order.oneof_decl.add(name="_note")
    if version == "full":
        proto.dependency.append("google/protobuf/timestamp.proto")
        status = proto.enum_type.add(name="Status")
        for number, name in enumerate(["NEW", "PAID", "SHIPPED"]):
            status.value.add(name=name, number=number)
        line = order.nested_type.add(name="Line")
        _field(line, "sku", 1, FD.TYPE_STRING)
        _field(line, "count", 2, FD.TYPE_INT64)
        tags = order.nested_type.add(name="TagsEntry")
        tags.options.map_entry = True
        _field(tags, "key", 1, FD.TYPE_STRING)
        _field(tags, "value", 2, FD.TYPE_INT64)
        _field(order, "status", 5, FD.TYPE_ENUM, type_name=f".{package}.Status")
        _field(order, "first", 6, FD.TYPE_MESSAGE, type_name=f".{package}.Order.Line")
        lines = _field(order, "lines", 7, FD.TYPE_MESSAGE, type_name=f".{package}.Order.Line")
        lines.label = REPEATED
        tag = _field(order, "tags", 8, FD.TYPE_MESSAGE, type_name=f".{package}.Order.TagsEntry")
        tag.label = REPEATED
        _field(order, "created", 9, FD.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    other = proto.message_type.add(name="Refund")  # a second message: index [1]
    _field(other, "id", 1, FD.TYPE_STRING)
    pool = descriptor_pool.DescriptorPool()
    if version == "full":
        pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return pool.FindFileByName(proto.name)


def order_class(version: str) -> Any:
    return GetMessageClass(order_file(version).message_types_by_name["Order"])


def write_descriptor_set(path: Path, version: str) -> Path:
    """`version`'s file and its imports as a FileDescriptorSet file at `path`."""
    path.write_bytes(descriptor_set_of(order_file(version)))
    return path


def order_message(version: str, level: int, partition: int, i: int, **extra: Any) -> bytes:
    cls = order_class(version)
    message = cls(id=f"{level}-{partition}-{i}", amount=i * 1.5, qty=i, **extra)
    if version == "full":
        message.status = i % 3
        message.first.sku, message.first.count = f"sku{i}", i
        message.lines.add(sku="a", count=1)
        message.lines.add(sku="b", count=2)
        message.tags["t"] = i
        message.created.FromSeconds(1_700_000_000 + i)
    return bytes(message.SerializeToString())
