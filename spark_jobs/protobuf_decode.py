"""Protobuf values (or keys) decoded in the Spark tasks, in Arrow batches.

No spark-protobuf jar is served to these machines, so the tasks decode with the `protobuf`
package: `mapInArrow` hands each task its records a batch at a time, the task builds the message
class once from the serialized `FileDescriptorSet` (drainer.records.protobuf), parses each
payload and returns the batch with two columns more: the decoded struct and the reason a record
did not decode. No row-at-a-time UDF: one Python call per batch, the rows stay in Arrow.

Types: scalars as their Spark type (uint32 a bigint, uint64 a decimal(20,0) so no value is cut
short), enums as their value's name, nested messages as structs, repeated fields as arrays,
maps as maps; `google.protobuf.Timestamp` a timestamp, the wrappers (`StringValue` …) their
nullable scalar, `Struct`/`Value`/`ListValue` JSON text; other messages (`Any`, `Duration` …)
structs of their fields. A field with presence (proto2, proto3 `optional`, oneof members,
messages) that is not set is null; a oneof is one column per member, null but the one set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from drainer.config.formats import RecordFormat
from drainer.errors import ConfigError
from drainer.records.protobuf import (
    descriptor_set_file,
    message_at,
    message_descriptor,
    pool_of,
    read_indexes,
    writer_descriptor_sets,
)
from drainer.records.registry import HEADER_BYTES

_WRAPPERS = {
    f"google.protobuf.{name}Value": kind
    for name, kind in (
        ("Double", DoubleType()),
        ("Float", FloatType()),
        ("Int64", LongType()),
        ("UInt64", DecimalType(20, 0)),
        ("Int32", IntegerType()),
        ("UInt32", LongType()),
        ("Bool", BooleanType()),
        ("String", StringType()),
        ("Bytes", BinaryType()),
    )
}
_JSON_TYPES = {"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"}
_TIMESTAMP = "google.protobuf.Timestamp"


def _scalar_types() -> dict[int, DataType]:
    from google.protobuf.descriptor import FieldDescriptor as FD

    return {
        FD.TYPE_DOUBLE: DoubleType(),
        FD.TYPE_FLOAT: FloatType(),
        FD.TYPE_INT64: LongType(),
        FD.TYPE_SINT64: LongType(),
        FD.TYPE_SFIXED64: LongType(),
        FD.TYPE_UINT64: DecimalType(20, 0),
        FD.TYPE_FIXED64: DecimalType(20, 0),
        FD.TYPE_INT32: IntegerType(),
        FD.TYPE_SINT32: IntegerType(),
        FD.TYPE_SFIXED32: IntegerType(),
        FD.TYPE_UINT32: LongType(),
        FD.TYPE_FIXED32: LongType(),
        FD.TYPE_BOOL: BooleanType(),
        FD.TYPE_STRING: StringType(),
        FD.TYPE_BYTES: BinaryType(),
        FD.TYPE_ENUM: StringType(),
    }


def spark_type(descriptor: Any, seen: tuple[str, ...] = ()) -> StructType:
    """A message's Spark struct (module docstring); a recursive message is a ConfigError."""
    if descriptor.full_name in seen:
        raise ConfigError(
            f"message {descriptor.full_name} contains itself ({' > '.join(seen)}): a recursive "
            "message has no Spark column type; decode it in a processor with `format: bytes`"
        )
    inner = (*seen, descriptor.full_name)
    return StructType([StructField(f.name, _field_type(f, inner)) for f in descriptor.fields])


def _field_type(field: Any, seen: tuple[str, ...]) -> DataType:
    if _is_map(field):
        key, value = (
            field.message_type.fields_by_name["key"],
            field.message_type.fields_by_name["value"],
        )
        return MapType(_one_type(key, seen), _one_type(value, seen))
    one = _one_type(field, seen)
    return ArrayType(one) if field.is_repeated else one


def _one_type(field: Any, seen: tuple[str, ...]) -> DataType:
    message = field.message_type
    if message is None:
        return _scalar_types()[field.type]
    if message.full_name == _TIMESTAMP:
        return TimestampType()
    if message.full_name in _WRAPPERS:
        return _WRAPPERS[message.full_name]
    if message.full_name in _JSON_TYPES:
        return StringType()
    return spark_type(message, seen)


def _is_map(field: Any) -> bool:
    message = field.message_type
    return bool(field.is_repeated and message is not None and message.GetOptions().map_entry)


def to_row(message: Any) -> dict[str, Any]:
    """A parsed message as the Python values its Spark struct takes (pyarrow converts them)."""
    row: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if _is_map(field):
            convert = _converter(field.message_type.fields_by_name["value"])
            row[field.name] = [(k, convert(v)) for k, v in value.items()]
        elif field.is_repeated:
            convert = _converter(field)
            row[field.name] = [convert(v) for v in value]
        elif field.has_presence and not message.HasField(field.name):
            row[field.name] = None
        else:
            row[field.name] = _converter(field)(value)
    return row


# each field's converter, made once per process (an enum's names, say), not once per record
_CONVERTERS: dict[Any, Callable[[Any], Any]] = {}


def _converter(field: Any) -> Callable[[Any], Any]:
    found = _CONVERTERS.get(field)
    if found is None:
        found = _CONVERTERS[field] = _make_converter(field)
    return found


def _make_converter(field: Any) -> Callable[[Any], Any]:
    from google.protobuf.descriptor import FieldDescriptor as FD

    if field.type == FD.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda number: names.get(number, str(number))
    if field.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return Decimal
    message = field.message_type
    if message is None:
        return _same
    if message.full_name == _TIMESTAMP:
        return lambda ts: ts.ToDatetime(tzinfo=UTC)
    if message.full_name in _WRAPPERS:
        uint64 = message.full_name == "google.protobuf.UInt64Value"
        return (lambda w: Decimal(w.value)) if uint64 else (lambda w: w.value)
    if message.full_name in _JSON_TYPES:
        from google.protobuf import json_format

        return lambda m: json.dumps(json_format.MessageToDict(m))
    return to_row


def _same(value: Any) -> Any:
    return value


def decoding(
    fmt: RecordFormat, raw: DataFrame, side: str, decoded: str, error: str
) -> tuple[DataFrame, StructType]:
    """`raw` with the decoded `side` column (`value` or `key`) as `decoded` and the reason it
    did not decode as `error`, and the decoded struct's type. With a registry, a first job
    collects the run's distinct schema ids and the driver fetches each writer schema once."""
    assert fmt.message is not None  # the config asks protobuf for one
    message = fmt.message
    if fmt.registry is None:
        path = fmt.schema_path(Path.cwd())
        assert path is not None  # likewise
        sets: dict[int, bytes] = {0: descriptor_set_file(path, message)}
        types = {0: spark_type(message_descriptor(sets[0], message, str(path)))}
        lacking: list[int] = []
    else:
        column = F.col(side)
        framed = column.isNotNull() & (F.length(column) > HEADER_BYTES)
        magic = F.hex(F.substring(column, 1, 1))
        schema_id = F.conv(F.hex(F.substring(column, 2, 4)), 16, 10).cast("long")
        ids = sorted(
            int(row[0])
            for row in raw.where(framed & (magic == "00")).select(schema_id).distinct().collect()
        )
        found = writer_descriptor_sets(fmt.registry, ids)
        sets, types, lacking = {}, {}, []
        for i, data in found.items():
            if data is None:
                continue
            try:
                descriptor = pool_of(data).FindMessageTypeByName(message)
            except KeyError:
                lacking.append(i)  # its records are bad ones, naming the message
                continue
            sets[i], types[i] = data, spark_type(descriptor)
    from spark_jobs.decode import merged_struct

    merged = merged_struct(dict(types), "a Protobuf message") if types else spark_type_empty()
    task = _task(sets, message, fmt.registry is not None, lacking, merged, (side, decoded, error))
    out = StructType(
        [*raw.schema.fields, StructField(decoded, merged), StructField(error, StringType())]
    )
    return raw.mapInArrow(task, out), merged


def spark_type_empty() -> StructType:
    """The struct when no record of the run has a usable writer schema (all bad ones)."""
    return StructType([StructField("value", BinaryType())])


def _task(
    sets: dict[int, bytes],
    message: str,
    framed: bool,
    lacking: list[int],
    merged: StructType,
    columns: tuple[str, str, str],
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function each task runs over its batches (only plain values in its closure)."""
    from pyspark.sql.pandas.types import to_arrow_type

    struct_type = to_arrow_type(merged)
    side, decoded, error = columns

    def decode_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from google.protobuf.message import DecodeError
        from google.protobuf.message_factory import GetMessageClass

        classes = {
            i: GetMessageClass(pool_of(data).FindMessageTypeByName(message))
            for i, data in sets.items()
        }
        named: dict[tuple[int, tuple[int, ...]], str] = {}  # (schema id, indexes): message
        for batch in batches:
            rows: list[dict[str, Any] | None] = []
            errors: list[str | None] = []
            for data in batch.column(side).to_pylist():
                row, why = None, None
                if data is not None:
                    try:
                        row = _decoded(data, classes, named, message, framed, lacking)
                    except DecodeError as err:
                        why = f"payload does not decode as {message} ({err})"
                    except _Bad as bad:
                        why = str(bad)
                rows.append(row)
                errors.append(why)
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, pa.array(rows, struct_type), pa.array(errors, pa.string())],
                names=[*batch.schema.names, decoded, error],
            )

    return decode_batches


class _Bad(Exception):
    """A record that does not decode; its message is the reason."""


def _decoded(
    data: bytes,
    classes: dict[int, Any],
    named: dict[tuple[int, tuple[int, ...]], str],
    message: str,
    framed: bool,
    lacking: list[int],
) -> dict[str, Any]:
    if not framed:
        return to_row(classes[0].FromString(data))
    if len(data) <= HEADER_BYTES:
        raise _Bad(f"truncated: {len(data)} bytes")
    if data[0] != 0:
        raise _Bad(f"wrong magic byte 0x{data[0]:02X}, not 0x00")
    schema_id = int.from_bytes(data[1:HEADER_BYTES], "big")
    if schema_id in lacking:
        raise _Bad(f"writer schema {schema_id} defines no message {message}")
    if schema_id not in classes:
        raise _Bad(f"unknown schema id {schema_id}")
    cls = classes[schema_id]
    try:
        indexes, start = read_indexes(data, HEADER_BYTES)
        at = (schema_id, tuple(indexes))
        if at not in named:
            named[at] = message_at(cls.DESCRIPTOR.file, indexes).full_name
    except ValueError as err:
        raise _Bad(f"{err} (writer schema {schema_id})") from None
    if named[at] != message:
        raise _Bad(
            f"message index {indexes} is {named[at]} in writer schema {schema_id}, not {message}"
        )
    return to_row(cls.FromString(data[start:]))
