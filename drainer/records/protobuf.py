"""Protobuf descriptors: a drain's `FileDescriptorSet` file, a registry's writer schemas, and the
Confluent wire format's message indexes.

Every writer schema travels to the Spark tasks as one serialized `FileDescriptorSet` (the file
and its imports, dependencies first), so a task rebuilds the message class from bytes alone with
a `DescriptorPool` of its own. The wire format (confluent-kafka's `ProtobufSerializer`): magic
byte 0, a big-endian 4-byte schema id, the message-index array (its length then each index, all
zigzag varints; the single byte 0 stands for [0], the file's first message), then the payload.
"""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

from drainer.config.formats import RegistryConfig
from drainer.errors import ConfigError
from drainer.records.registry import MAGIC, registry_client

PROTOBUF = "PROTOBUF"


def descriptor_set_file(path: Path, message: str) -> bytes:
    """A `FileDescriptorSet` file (`protoc --descriptor_set_out=FILE --include_imports`) that
    defines `message`, as bytes."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        data = path.read_bytes()
        descriptor_pb2.FileDescriptorSet.FromString(data)
    except OSError as err:
        raise ConfigError(f"descriptor set {path} cannot be read: {err}") from None
    except DecodeError:
        raise ConfigError(
            f"{path} is not a FileDescriptorSet: make it with `protoc --include_imports "
            f"--descriptor_set_out={path.name} your.proto`"
        ) from None
    message_descriptor(data, message, str(path))
    return data


def pool_of(descriptor_set: bytes) -> Any:
    """A fresh `DescriptorPool` holding the set's files (dependencies before their users)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set).file
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    pending = {f.name: f for f in files}

    def add(name: str) -> None:
        if name in added or name not in pending:
            return
        added.add(name)
        for dep in pending[name].dependency:
            add(dep)
        pool.Add(pending[name])

    for name in pending:
        add(name)
    return pool


def message_descriptor(descriptor_set: bytes, message: str, where: str) -> Any:
    """The descriptor of `message` (a full name such as `shop.Order`) in the set."""
    try:
        return pool_of(descriptor_set).FindMessageTypeByName(message)
    except KeyError:
        raise ConfigError(
            f"{where} defines no message {message!r}: give its full name, package included "
            "(e.g. `shop.Order`), as `message`"
        ) from None
    except TypeError as err:  # an import missing from the set
        raise ConfigError(
            f"{where} is incomplete ({err}): make it with `protoc --include_imports`"
        ) from None


def message_class(descriptor_set: bytes, message: str) -> Any:
    from google.protobuf.message_factory import GetMessageClass

    return GetMessageClass(message_descriptor(descriptor_set, message, "the descriptor set"))


def descriptor_set_of(file_descriptor: Any) -> bytes:
    """The `FileDescriptorSet` of a file and everything it imports, dependencies first."""
    from google.protobuf import descriptor_pb2

    out = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(fd: Any) -> None:
        if fd.name in seen:
            return
        seen.add(fd.name)
        for dep in fd.dependencies:
            add(dep)
        fd.CopyToProto(out.file.add())

    add(file_descriptor)
    return bytes(out.SerializeToString())


def writer_descriptor_sets(config: RegistryConfig, ids: list[int]) -> dict[int, bytes | None]:
    """Each schema id's writer schema as a `FileDescriptorSet`; None for an id the registry
    does not know or that is not a Protobuf schema. References (imports registered as schemas
    of their own) are fetched too; the well-known types come with the protobuf package."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    from google.protobuf import descriptor_pool

    try:
        from confluent_kafka.schema_registry._sync.protobuf import _resolve_named_schema
        from confluent_kafka.schema_registry.common.protobuf import _init_pool, _str_to_proto
    except ImportError as err:
        raise ConfigError(
            f"Protobuf from a registry needs confluent-kafka's registry client ({err}): "
            "pip install 'confluent-kafka[schemaregistry]'"
        ) from None
    client = registry_client(config)
    found: dict[int, bytes | None] = {}
    for schema_id in ids:
        try:
            schema = client.get_schema(schema_id, fmt="serialized")
        except SchemaRegistryError:
            found[schema_id] = None
            continue
        if schema.schema_type != PROTOBUF or schema.schema_str is None:
            found[schema_id] = None
            continue
        pool = descriptor_pool.DescriptorPool()
        _init_pool(pool)
        _resolve_named_schema(schema, client, pool)
        fd_proto = _str_to_proto(f"schema_{schema_id}.proto", schema.schema_str)
        pool.Add(fd_proto)
        found[schema_id] = descriptor_set_of(pool.FindFileByName(fd_proto.name))
    return found


def register_protobuf(config: RegistryConfig, subject: str, file_descriptor: Any) -> int:
    """Register a Protobuf file (without imports beyond the well-known types) under
    `subject`, as confluent-kafka's serializer does; returns its schema id."""
    from confluent_kafka.schema_registry import Schema

    text = base64.standard_b64encode(file_descriptor.serialized_pb).decode("ascii")
    return int(registry_client(config).register_schema(subject, Schema(text, PROTOBUF)))


def index_array(descriptor: Any) -> list[int]:
    """Where a message sits in its file: top-level index, then nested indexes."""
    path: list[int] = []
    current = descriptor
    while current.containing_type is not None:
        parent = current.containing_type
        path.append(list(parent.nested_types).index(current))
        current = parent
    path.append(list(current.file.message_types_by_name).index(current.name))
    return path[::-1]


def _zigzag(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def wire_frame(schema_id: int, indexes: list[int], payload: bytes) -> bytes:
    """A payload in the wire format (module docstring)."""
    body = b"\x00" if indexes == [0] else b"".join(map(_zigzag, [len(indexes), *indexes]))
    return struct.pack(">bI", MAGIC, schema_id) + body + payload


def read_indexes(data: bytes, pos: int) -> tuple[list[int], int]:
    """The message-index array at `pos`, and where the payload starts; ValueError when the
    bytes end inside it."""

    def varint(at: int) -> tuple[int, int]:
        shift = result = 0
        while True:
            if at >= len(data) or shift > 63:
                raise ValueError("the message indexes are cut short")
            byte = data[at]
            result |= (byte & 0x7F) << shift
            at += 1
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1), at
            shift += 7

    count, pos = varint(pos)
    if count == 0:
        return [0], pos
    if count < 0 or count > 64:
        raise ValueError(f"{count} message indexes")
    indexes = []
    for _ in range(count):
        index, pos = varint(pos)
        indexes.append(index)
    return indexes, pos


def message_at(file_descriptor: Any, indexes: list[int]) -> Any:
    """The message descriptor an index array names; ValueError when it names none."""
    types = list(file_descriptor.message_types_by_name.values())
    found = None
    for index in indexes:
        if not 0 <= index < len(types):
            raise ValueError(f"message index {indexes} names no message")
        found = types[index]
        types = list(found.nested_types)
    return found
