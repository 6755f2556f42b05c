"""Values in a declared format, for `drainer produce` (test data, smoke tests, the demo).

Synthetic values follow the schema: every field gets a value of its type that varies with the
record's sequence number, so a drain's typed table shows something to check. JSON lines from
stdin are encoded as they are (Avro checks each against the schema).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from drainer.config.formats import RecordFormat
from drainer.errors import ConfigError
from drainer.records.json_schema import ddl_of_file
from drainer.records.registry import frame, register

Encoder = Callable[[Any], bytes]
# top-level `name type` pairs of a Spark DDL string (nested types: their values are null)
_DDL_FIELD = re.compile(r"`?([A-Za-z_][A-Za-z0-9_]*)`?\s+([A-Za-z]+)(<[^,]*>)?")


def encoder(fmt: RecordFormat, topic: str) -> tuple[Encoder, list[tuple[str, str]]]:
    """How values of `fmt` are encoded, and the (field, type) list synthetic values follow;
    a registry format registers its schema under `<topic>-value` first."""
    if fmt.format == "json":
        return (lambda value: json.dumps(value).encode()), _json_fields(fmt)
    if fmt.format == "avro":
        return _avro(fmt, topic)
    if fmt.format == "protobuf":
        return _protobuf(fmt, topic)
    if fmt.format in ("string", "bytes"):
        return (lambda value: str(value).encode()), [("value", "string")]
    raise ConfigError(
        f"`drainer produce --format` takes json, avro, protobuf, string or bytes, not {fmt.format}"
    )


def synthetic_values(fields: list[tuple[str, str]], count: int, seed: int) -> Iterator[Any]:
    """`count` values of the schema's fields, varying with their sequence number."""
    for seq in range(count):
        n = seq + seed
        row = {name: _value_of(kind, name, n) for name, kind in fields}
        yield row["value"] if [name for name, _ in fields] == ["value"] else row


def _value_of(kind: str, name: str, n: int) -> Any:
    kind = kind.lower()
    if kind in ("string", "text"):
        return f"{name}-{n}"
    if kind in ("int", "integer", "long", "bigint", "smallint", "tinyint"):
        return n
    if kind in ("double", "float", "number", "decimal"):
        return n * 1.5
    if kind == "boolean":
        return n % 2 == 0
    if kind == "timestamp":
        return f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z"
    if kind == "date":
        return f"2026-01-{n % 28 + 1:02d}"
    return None


def _json_fields(fmt: RecordFormat) -> list[tuple[str, str]]:
    path = fmt.schema_path(Path.cwd())
    ddl = ddl_of_file(path) if path is not None else fmt.schema_ or ""
    return [(m.group(1), "" if m.group(3) else m.group(2)) for m in _DDL_FIELD.finditer(ddl)]


def _avro(fmt: RecordFormat, topic: str) -> tuple[Encoder, list[tuple[str, str]]]:
    import fastavro

    path = fmt.schema_path(Path.cwd())
    if path is None:
        raise ConfigError("producing Avro needs the writer schema: --schema FILE.avsc")
    text = path.read_text()
    try:
        parsed = fastavro.parse_schema(json.loads(text))
    except (ValueError, fastavro.schema.SchemaParseException) as err:
        raise ConfigError(f"{path} is not an Avro schema: {err}") from None
    schema_id = None if fmt.registry is None else register(fmt.registry, f"{topic}-value", text)

    def encode(value: Any) -> bytes:
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, parsed, value)
        except (ValueError, TypeError, KeyError) as err:
            raise ConfigError(f"{value!r} does not fit the Avro schema {path}: {err}") from None
        body = out.getvalue()
        return body if schema_id is None else frame(schema_id, body)

    fields = [(f["name"], _avro_scalar(f["type"])) for f in json.loads(text).get("fields", [])]
    return encode, fields


def _avro_scalar(kind: Any) -> str:
    """An Avro field type's scalar name (a nullable union's other branch); '' for the rest."""
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        return _avro_scalar(others[0]) if len(others) == 1 else ""
    return kind if isinstance(kind, str) else ""


def _protobuf(fmt: RecordFormat, topic: str) -> tuple[Encoder, list[tuple[str, str]]]:
    """Messages of the descriptor set's `message`, each from a dict of its fields (JSON names
    or field names), framed in the wire format when a registry is given."""
    from google.protobuf import json_format
    from google.protobuf.descriptor import FieldDescriptor as FD
    from google.protobuf.message_factory import GetMessageClass

    from drainer.records.protobuf import (
        descriptor_set_file,
        index_array,
        message_descriptor,
        register_protobuf,
        wire_frame,
    )

    path = fmt.schema_path(Path.cwd())
    if path is None or fmt.message is None:
        raise ConfigError(
            "producing Protobuf needs the writer's messages: --schema FILE.desc --message NAME"
        )
    descriptor = message_descriptor(descriptor_set_file(path, fmt.message), fmt.message, str(path))
    cls = GetMessageClass(descriptor)
    framed: Callable[[bytes], bytes] = lambda body: body  # noqa: E731
    if fmt.registry is not None:
        schema_id = register_protobuf(fmt.registry, f"{topic}-value", descriptor.file)
        indexes = index_array(descriptor)
        framed = lambda body: wire_frame(schema_id, indexes, body)  # noqa: E731

    def encode(value: Any) -> bytes:
        if isinstance(value, dict):  # a field synthetic values leave null: not set
            value = {name: v for name, v in value.items() if v is not None}
        try:
            message = json_format.ParseDict(value, cls())
        except json_format.ParseError as err:
            raise ConfigError(f"{value!r} does not fit {fmt.message} of {path}: {err}") from None
        return framed(message.SerializeToString())

    kinds = {FD.TYPE_STRING: "string", FD.TYPE_DOUBLE: "double", FD.TYPE_FLOAT: "float"}
    kinds.update(dict.fromkeys((FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_SINT32), "int"))
    kinds[FD.TYPE_BOOL] = "boolean"
    fields = [(f.name, "" if f.is_repeated else kinds.get(f.type, "")) for f in descriptor.fields]
    return encode, fields


def encoded(values: Iterable[Any], encode: Encoder) -> Iterator[bytes]:
    for value in values:
        yield encode(value)
