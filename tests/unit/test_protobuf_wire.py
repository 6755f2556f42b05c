"""Protobuf descriptors and the Confluent wire format, checked against confluent-kafka's own
serializer (its `mock://` registry, in process): what it frames, drainer reads back."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drainer.config.formats import RegistryConfig
from drainer.errors import ConfigError
from drainer.records.protobuf import (
    descriptor_set_file,
    index_array,
    message_at,
    pool_of,
    read_indexes,
    wire_frame,
    writer_descriptor_sets,
)
from tests.support.drains import order_class, order_file, order_message, write_descriptor_set


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=6))
def test_message_indexes_read_back_what_was_framed(indexes):
    framed = wire_frame(7, indexes, b"payload")
    assert read_indexes(framed, 5) == (indexes, len(framed) - len(b"payload"))


def test_the_first_message_is_framed_as_one_zero_byte():
    assert wire_frame(1, [0], b"") == b"\x00\x00\x00\x00\x01\x00"


def test_indexes_cut_short_are_a_value_error():
    with pytest.raises(ValueError, match="cut short"):
        read_indexes(b"\x00\x00\x00\x00\x01\x06\x00", 5)


def test_confluent_serializer_frames_are_read_and_decoded():
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from drainer.records.registry import registry_client

    config = RegistryConfig(url=f"mock://pb-{uuid.uuid4().hex[:8]}")
    client = registry_client(config)
    assert isinstance(client, SchemaRegistryClient)
    cls = order_class("full")
    nested = cls.DESCRIPTOR.nested_types_by_name["Line"]
    serialize = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
    message = cls.FromString(order_message("full", 1, 0, 4))
    framed = serialize(message, SerializationContext("orders-0", MessageField.VALUE))
    assert framed is not None
    schema_id = int.from_bytes(framed[1:5], "big")
    indexes, start = read_indexes(framed, 5)
    assert indexes == [0] == index_array(cls.DESCRIPTOR) and index_array(nested) == [0, 0]
    sets = writer_descriptor_sets(config, [schema_id, 999])
    assert sets[999] is None
    writer = pool_of(sets[schema_id] or b"").FindMessageTypeByName("shop.Order")
    assert message_at(writer.file, indexes).full_name == "shop.Order"
    assert message_at(writer.file, [1]).full_name == "shop.Refund"
    assert cls.FromString(framed[start:]) == message


def test_a_descriptor_set_without_the_message_names_it(tmp_path):
    path = write_descriptor_set(tmp_path / "o.desc", "flat")
    assert descriptor_set_file(path, "shop.Order")
    with pytest.raises(ConfigError, match="defines no message 'Order'.*package included"):
        descriptor_set_file(path, "Order")
    (tmp_path / "not.desc").write_bytes(b"\xff\xff")
    with pytest.raises(ConfigError, match="not a FileDescriptorSet.*protoc --include_imports"):
        descriptor_set_file(tmp_path / "not.desc", "shop.Order")


def test_a_recursive_message_is_refused_naming_it():
    pytest.importorskip("pyspark")
    from google.protobuf import descriptor_pb2, descriptor_pool

    from spark_jobs.protobuf_decode import spark_type

    proto = descriptor_pb2.FileDescriptorProto(name="tree.proto", package="t", syntax="proto3")
    node = proto.message_type.add(name="Node")
    node.field.add(name="child", number=1, type=11, label=1, type_name=".t.Node")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    with pytest.raises(ConfigError, match="message t.Node contains itself"):
        spark_type(pool.FindMessageTypeByName("t.Node"))
    assert spark_type(order_file("flat").message_types_by_name["Order"]).simpleString() == (
        "struct<id:string,amount:double,qty:int>"
    )


def test_well_known_types_map_to_their_spark_types_and_values():
    pytest.importorskip("pyspark")
    from google.protobuf import (
        descriptor_pb2,
        descriptor_pool,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )
    from google.protobuf.message_factory import GetMessageClass

    from spark_jobs.protobuf_decode import spark_type, to_row

    proto = descriptor_pb2.FileDescriptorProto(name="wkt.proto", package="w", syntax="proto3")
    proto.dependency.extend(
        ["google/protobuf/wrappers.proto", "google/protobuf/struct.proto"]
        + ["google/protobuf/timestamp.proto"]
    )
    msg = proto.message_type.add(name="M")
    for number, (name, type_name) in enumerate(
        [
            ("label", ".google.protobuf.StringValue"),
            ("big", ".google.protobuf.UInt64Value"),
            ("attrs", ".google.protobuf.Struct"),
            ("at", ".google.protobuf.Timestamp"),
        ],
        start=1,
    ):
        msg.field.add(name=name, number=number, type=11, label=1, type_name=type_name)
    msg.field.add(name="count", number=5, type=4, label=1)  # uint64
    pool = descriptor_pool.DescriptorPool()
    for module in (wrappers_pb2, struct_pb2, timestamp_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    descriptor = pool.FindMessageTypeByName("w.M")
    assert spark_type(descriptor).simpleString() == (
        "struct<label:string,big:decimal(20,0),attrs:string,at:timestamp,count:decimal(20,0)>"
    )
    cls = GetMessageClass(descriptor)
    message = cls(count=2**64 - 1)
    message.label.value = "x"
    message.attrs.update({"a": 1})
    row = to_row(message)
    assert row["label"] == "x" and row["big"] is None and row["at"] is None  # unset: null
    assert row["attrs"] == '{"a": 1.0}' and row["count"] == 2**64 - 1
