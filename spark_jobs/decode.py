"""Declared formats decoded inside Spark (docs/configuration.md#record-formats).

The run's Kafka read becomes one typed row per record: the value's fields as columns, then the
reserved metadata columns (drainer.config.formats.METADATA_COLUMNS), then `ERROR`, the reason a
record did not decode (null when it did). Decoding uses Spark's own functions (`from_json`,
`from_avro` of the spark-avro jar), or for Protobuf, whose jar is not served here, the
`protobuf` package in Arrow batches (spark_jobs.protobuf_decode); never a row-at-a-time Python UDF.
A key declared as json, avro or protobuf decodes the same way into a struct in `_key`; a key
that does not decode is a bad record like a value (its reason prefixed `key: `).

The Confluent wire format: a first job collects the run's distinct schema ids (a writer may have
evolved its schema mid-range), the driver fetches each writer schema once, and each record's
payload (after the 5-byte header) is decoded with its own writer schema into the union of the
schemas' fields; a field whose type differs between two writer schemas is an incompatible change
that stops the run before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from drainer.config import DrainConfig
from drainer.config.formats import METADATA_COLUMNS, RecordFormat
from drainer.errors import ConfigError
from drainer.records.registry import HEADER_BYTES, writer_schemas
from spark_jobs.decode_errors import CORRUPT, error_of, json_schema

ERROR = "_drainer_error"  # why a record did not decode; dropped before the sink
# `ERROR` with a JSON value's or key's reason left untold (`decode_errors.untold_json`): null
# exactly where `ERROR` is. The filters every record passes test this one: the JSON reason
# parses the record again with `from_json`, which Spark evaluates without generated code, and
# it took the whole filter out of the stage's generated code (~0.25 s per 1M records, measured
# on the upsert benchmark's read); that reason is built for the bad records alone
QUICK_ERROR = "_drainer_quick_error"
# the record as read, for the dead letters of `bad_records: dead_letter`; dropped likewise
RAW_KEY, RAW_VALUE, RAW_HEADERS = "_drainer_raw_key", "_drainer_raw_value", "_drainer_raw_headers"
RAW_TIMESTAMP = "_drainer_raw_timestamp"  # a dead letter's, kept when `_timestamp` is not
RAW_COLUMNS = (RAW_KEY, RAW_VALUE, RAW_HEADERS, RAW_TIMESTAMP)
_DECODED = "_drainer_decoded"
BARRIER = "_drainer_task_partition"
_WHOLE = 2_147_483_647  # substring length: the rest of the bytes


class Decoding(NamedTuple):
    """A format's decoding: the value (a struct when `fields` names its fields), the reason a
    record did not decode as far as the value alone tells, columns to compute first, and the
    read to decode from when the format added columns to it (Protobuf's Arrow batches)."""

    value: Column
    why: Column
    fields: list[str] | None
    pre: dict[str, Column] = {}
    frame: DataFrame | None = None


# key formats decoded into a struct in `_key`; `string` and `bytes` keys are cast or kept
STRUCTURED = ("json", "avro", "protobuf")


def decode(drain: DrainConfig, raw: DataFrame) -> DataFrame:
    """The read as typed rows plus metadata and `ERROR` (see the module's docstring)."""
    fmt = drain.value or RecordFormat(format="bytes")
    value = _value(fmt, raw, "value")
    raw = raw if value.frame is None else value.frame
    key = None
    if drain.key is not None and drain.key.format in STRUCTURED:
        key = _value(drain.key, raw, "key")
        raw = raw if key.frame is None else key.frame
    if value.fields is None and key is None:
        return raw.select(
            value.value.alias("value"),
            *_metadata(drain, None),
            *_raw(value.why, value.why),
            F.lit(0).alias(BARRIER),
        )
    fields = value.fields or []
    clash = sorted(set(fields) & set(METADATA_COLUMNS))
    if clash:
        raise ConfigError(
            f"drain '{drain.name}': value fields {clash} use names reserved for the metadata "
            f"columns {list(METADATA_COLUMNS)}: rename them in the schema"
        )
    # each struct is decoded once, in a projection of its own that its fields and the error
    # read (see `barrier`)
    pre = {**value.pre, **(key.pre if key else {})}
    if pre:  # columns the decoded structs read, computed once in a projection before them
        raw = raw.withColumns({**pre, BARRIER: F.spark_partition_id()})
    structs = {_decoded("value"): value.value} if value.fields is not None else {}
    if key is not None:
        structs[_decoded("key")] = key.value
    staged = raw.withColumns({**structs, BARRIER: F.spark_partition_id()})
    decoded = F.col(_decoded("value"))
    decoded_key = F.col(_decoded("key"))

    def error(reason: bool) -> Column:
        """Why the record did not decode; `reason=False`: a JSON reason untold."""
        found = value.why
        if value.fields is not None:
            found = error_of(fmt, decoded, value.why, "value", reason)
        if key is not None:
            assert drain.key is not None
            key_error = error_of(drain.key, decoded_key, key.why, "key", reason)
            found = F.coalesce(found, F.concat(F.lit("key: "), key_error))
        return found

    if value.fields is None:
        columns = [value.value.alias("value")]
    else:
        columns = [decoded.getField(name).alias(name) for name in fields]
    key_column = None
    if key is not None:
        # the key's declared fields only (JSON's struct also holds its corrupt-record text)
        key_fields = [decoded_key.getField(name).alias(name) for name in key.fields or []]
        key_column = F.when(decoded_key.isNotNull(), F.struct(*key_fields))
    return staged.select(
        *columns,
        *_metadata(drain, key_column),
        *_raw(error(reason=True), error(reason=False)),
        F.col(BARRIER),
    )


def _decoded(side: str) -> str:
    """The column a side's decoded struct is computed in."""
    return _DECODED if side == "value" else f"{_DECODED}_{side}"


def barrier() -> Column:
    """Always true, and part of every filter on `ERROR` or `QUICK_ERROR`: it reads a
    nondeterministic column of the projection that decodes, so the optimizer cannot push the
    filter below that projection (which would inline `from_avro` once per reference in the
    filter: measured, 1M Avro records took 35 s instead of 19 s)."""
    return F.col(BARRIER) >= 0


def _raw(error: Column, quick: Column) -> list[Column]:
    """`ERROR`, `QUICK_ERROR` and the record as read."""
    return [
        error.alias(ERROR),
        quick.alias(QUICK_ERROR),
        F.col("key").alias(RAW_KEY),
        F.col("value").alias(RAW_VALUE),
        F.col("headers").alias(RAW_HEADERS),
        F.col("timestamp").alias(RAW_TIMESTAMP),
    ]


def _metadata(drain: DrainConfig, decoded_key: Column | None) -> list[Column]:
    """The metadata columns the rows carry (`DrainConfig.metadata`: those the sink writes and
    those the run reads): one left out is not computed, since the decode's projection keeps
    what it makes (`barrier`)."""
    key = F.col("key").cast("string") if drain.key and drain.key.format == "string" else "key"
    if decoded_key is not None:
        key = decoded_key
    columns = {
        "_topic": F.col("topic"),
        "_partition": F.col("partition"),
        "_offset": F.col("offset"),
        "_timestamp": F.col("timestamp"),
        "_level": F.col("level"),
        "_key": F.col(key) if isinstance(key, str) else key,
        # key and base64 value pairs, as JSON: a text column every sink stores
        "_headers": F.when(F.size("headers") > 0, F.to_json("headers")),
    }
    return [columns[name].alias(name) for name in drain.metadata()]


def _value(fmt: RecordFormat, raw: DataFrame, side: str) -> Decoding:
    """The decoded `side` (`value` or `key`), a first error expression, and the struct's field
    names (None: the value is one column)."""
    if fmt.format == "bytes":
        return Decoding(F.col(side), F.lit(None).cast("string"), None)
    if fmt.format == "string":
        return Decoding(F.col(side).cast("string"), F.lit(None).cast("string"), None)
    if fmt.format == "json":
        return _json(fmt, side)
    if fmt.format == "protobuf":
        return _protobuf(fmt, raw, side)
    avro = _wire_avro(fmt, raw, side) if fmt.registry is not None else _avro_file(fmt, raw, side)
    if fmt.envelope == "debezium" and side == "value":  # a key is the key's own record
        return _debezium_avro(avro, raw, fmt.registry is None)
    return avro


def _protobuf(fmt: RecordFormat, raw: DataFrame, side: str) -> Decoding:
    """Decoded in Python in Arrow batches (spark_jobs.protobuf_decode): no spark-protobuf jar here."""
    from spark_jobs.protobuf_decode import decoding

    struct, error = f"_drainer_pb_{side}", f"_drainer_pb_{side}_error"
    frame, merged = decoding(fmt, raw, side, struct, error)
    return Decoding(F.col(struct), F.col(error), merged.fieldNames(), frame=frame)


def _json(fmt: RecordFormat, side: str) -> Decoding:
    schema = json_schema(fmt, side)
    if fmt.envelope == "debezium":
        return _debezium(schema, side)
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT, StringType())])
    parsed = F.from_json(
        F.col(side).cast("string"),
        with_corrupt,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT},
    )
    return Decoding(parsed, F.lit(None).cast("string"), schema.fieldNames())


# the columns a Debezium change event adds to its row (docs/state-tables.md)
CDC_COLUMNS = ("_op", "_source_ts_ms", "_source_lsn")


def _debezium(row: StructType, side: str) -> Decoding:
    """A Debezium change event, with or without the JSON converter's `schema`/`payload`
    wrapper: the value's row is `after` (`before` for a delete, `op = d`) plus `_op` and the
    source's `ts_ms` and `lsn`; a key's is its `payload` when wrapped."""
    source = StructType([StructField("ts_ms", LongType()), StructField("lsn", LongType())])
    if side == "value":
        event = StructType(
            [
                StructField("before", row),
                StructField("after", row),
                StructField("op", StringType()),
                StructField("source", source),
            ]
        )
    else:
        event = row
    parsed = F.from_json(
        F.col(side).cast("string"),
        StructType(
            [*event.fields, StructField("payload", event), StructField(CORRUPT, StringType())]
        ),
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT},
    )
    wrapped = F.col(side).cast("string").contains('"payload"')
    plain = F.struct(*[parsed.getField(f.name).alias(f.name) for f in event.fields])
    chosen = F.when(wrapped, parsed.getField("payload")).otherwise(plain)
    if side == "value":
        image = F.when(chosen.getField("op") == "d", chosen.getField("before")).otherwise(
            chosen.getField("after")
        )
        columns = [image.getField(f.name).alias(f.name) for f in row.fields] + [
            chosen.getField("op").alias("_op"),
            chosen.getField("source").getField("ts_ms").alias("_source_ts_ms"),
            chosen.getField("source").getField("lsn").alias("_source_lsn"),
        ]
        names = [*row.fieldNames(), *CDC_COLUMNS]
    else:
        columns = [chosen.getField(f.name).alias(f.name) for f in row.fields]
        names = row.fieldNames()
    value = F.when(parsed.isNotNull(), F.struct(*columns, parsed.getField(CORRUPT).alias(CORRUPT)))
    return Decoding(value, F.lit(None).cast("string"), names)


def _debezium_avro(avro: Decoding, raw: DataFrame, own_error: bool) -> Decoding:
    """A Debezium change event as its Avro converter writes it (`before`, `after`, `op`,
    `source`, `ts_ms`): unwrapped as the JSON one is (`_debezium`), the row `after` (`before`
    for a delete) plus `_op` and the source's `ts_ms` and `lsn` (null where the connector's
    source block has no `lsn`). `own_error`: the schema file's check of required fields reads
    the envelope's, which the unwrapped row no longer has: a record without `op` fails."""
    framed = raw.withColumns(avro.pre) if avro.pre else raw
    event = framed.select(avro.value.alias("v")).schema["v"].dataType
    assert isinstance(event, StructType)
    names = event.fieldNames()
    row = event["after"].dataType if "after" in names else None
    if not ({"before", "op"} <= set(names) and isinstance(row, StructType)):
        raise ConfigError(
            f"value.schema is not a Debezium change event (its fields: {', '.join(names)}): "
            "envelope: debezium needs the record Debezium's Avro converter writes, with "
            "`before`, `after` (the table's row) and `op`"
        )
    source = event["source"].dataType if "source" in names else StructType([])
    assert isinstance(source, StructType)

    def of_source(name: str) -> Column:
        if name in source.fieldNames():
            return avro.value.getField("source").getField(name).cast("long")
        return F.lit(None).cast("long")

    image = F.when(avro.value.getField("op") == "d", avro.value.getField("before")).otherwise(
        avro.value.getField("after")
    )
    columns = [image.getField(f.name).alias(f.name) for f in row.fields] + [
        avro.value.getField("op").alias("_op"),
        of_source("ts_ms").alias("_source_ts_ms"),
        of_source("lsn").alias("_source_lsn"),
    ]
    value = F.when(avro.value.isNotNull(), F.struct(*columns))
    why = avro.why
    if own_error:
        decoded = F.col(_decoded("value"))
        why = F.when(
            decoded.isNull() | decoded.getField("_op").isNull(),
            F.lit("the payload does not decode as a Debezium change event with its Avro schema"),
        )
    return avro._replace(value=value, why=why, fields=[*row.fieldNames(), *CDC_COLUMNS])


def _avro_file(fmt: RecordFormat, raw: DataFrame, side: str) -> Decoding:
    from pyspark.sql.avro.functions import from_avro

    path = fmt.schema_path(Path.cwd())
    assert path is not None  # the config's validation asks avro for a schema or a registry
    schema_text = path.read_text()
    decoded = from_avro(F.col(side), schema_text, {"mode": "PERMISSIVE"})
    fields = _struct_fields(raw, decoded, str(path))
    missing = _required_missing(F.col(_decoded(side)), schema_text)
    why = F.when(missing, F.lit("the payload does not decode with its Avro schema"))
    return Decoding(decoded, why, fields)


def _required(schema_text: str) -> list[str]:
    """The fields of an Avro record schema that are not a union with null."""
    try:
        fields = json.loads(schema_text).get("fields", [])
    except (ValueError, AttributeError):
        fields = []
    return [
        f["name"] for f in fields if not (isinstance(f.get("type"), list) and "null" in f["type"])
    ]


def _required_missing(decoded: Column, schema_text: str) -> Column:
    """True when a decoded Avro record lacks a required field: what `from_avro` in PERMISSIVE
    mode returns for a payload it cannot read is a record of nulls, not a null."""
    missing = decoded.isNull()
    for name in _required(schema_text):
        missing = missing | decoded.getField(name).isNull()
    return missing


def _struct_fields(raw: DataFrame, decoded: Column, where: str) -> list[str]:
    kind = raw.select(decoded.alias("v")).schema["v"].dataType
    if not isinstance(kind, StructType):
        raise ConfigError(f"Avro schema {where} is not a record: declare a record schema")
    return kind.fieldNames()


def _wire_avro(fmt: RecordFormat, raw: DataFrame, side: str) -> Decoding:
    """Confluent wire format: each record decoded with its writer schema (module docstring)."""
    from pyspark.sql.avro.functions import from_avro

    assert fmt.registry is not None
    value = F.col(side)
    framed = value.isNotNull() & (F.length(value) >= HEADER_BYTES)
    magic = F.hex(F.substring(value, 1, 1))
    schema_id = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")
    payload = F.substring(value, HEADER_BYTES + 1, _WHOLE)
    ids = sorted(
        int(row[0])
        for row in raw.where(framed & (magic == "00")).select(schema_id).distinct().collect()
    )
    schemas = writer_schemas(fmt.registry, ids)
    known = {i: text for i, text in schemas.items() if text is not None}
    decoders = {i: from_avro(payload, text, {"mode": "PERMISSIVE"}) for i, text in known.items()}
    types = {i: raw.select(d.alias("v")).schema["v"].dataType for i, d in sorted(decoders.items())}
    # each writer schema's decoding in a column of the decoding projection, evaluated only for
    # its own records; the merged struct reads these columns
    pre = {f"_drainer_{side}_writer_{i}": F.when(schema_id == i, d) for i, d in decoders.items()}
    decoders = {i: F.col(f"_drainer_{side}_writer_{i}") for i in decoders}
    merged = merged_struct(types, "an Avro record")
    _check_required(types, {i: _required(text) for i, text in known.items()})
    struct: Column = F.lit(None).cast(merged)
    for i, decoded in decoders.items():
        mine = types[i]
        assert isinstance(mine, StructType)
        aligned = F.struct(
            *[
                decoded.getField(f.name).alias(f.name)
                if f.name in mine.fieldNames()
                else F.lit(None).cast(f.dataType).alias(f.name)
                for f in merged.fields
            ]
        )
        readable = ~_required_missing(decoded, known[i])
        struct = F.when(schema_id == i, F.when(readable, aligned)).otherwise(struct)
    unknown = ~schema_id.isin(list(known)) if known else F.lit(True)
    decoded = F.col(_decoded(side))
    error = (
        F.when(~framed, F.concat(F.lit("truncated: "), F.length(value), F.lit(" bytes")))
        .when(magic != "00", F.concat(F.lit("wrong magic byte 0x"), magic, F.lit(", not 0x00")))
        .when(unknown, F.concat(F.lit("unknown schema id "), schema_id.cast("string")))
        .when(
            decoded.isNull(),
            F.concat(
                F.lit("payload does not decode with writer schema "), schema_id.cast("string")
            ),
        )
    )
    return Decoding(struct, error, merged.fieldNames(), pre)


def _check_required(types: dict[int, DataType], required: dict[int, list[str]]) -> None:
    """A field required by one writer schema of the run and missing from another is a removed
    required field: an incompatible change (ConfigError naming it)."""
    for i, names in required.items():
        for j, kind in types.items():
            have = kind.fieldNames() if isinstance(kind, StructType) else []
            gone = [name for name in names if name not in have]
            if gone:
                raise ConfigError(
                    f"incompatible schema change: field {gone[0]} is required in writer schema "
                    f"{i} but missing from writer schema {j}; nothing was committed: keep the "
                    "field (or make it optional with a default first), or drain it apart"
                )


def merged_struct(types: dict[int, DataType], what: str) -> StructType:
    """The union of the writer schemas' fields, first appearance first; a field whose type
    differs between two of them is an incompatible change (ConfigError naming it)."""
    fields: dict[str, tuple[int, StructField]] = {}
    for schema_id, kind in types.items():
        if not isinstance(kind, StructType):
            raise ConfigError(f"writer schema {schema_id} is not {what}")
        for field in kind.fields:
            seen = fields.get(field.name)
            if seen is None:
                fields[field.name] = (schema_id, field)
            elif seen[1].dataType != field.dataType:
                raise ConfigError(
                    f"incompatible schema change: field {field.name} is "
                    f"{seen[1].dataType.simpleString()} in writer schema {seen[0]} but "
                    f"{field.dataType.simpleString()} in writer schema {schema_id}; nothing "
                    "was committed: make the change a new optional field, or drain it apart"
                )
    if not fields:  # no record with a known writer schema: the run's rows are all bad ones
        return StructType([StructField("value", BinaryType())])
    return StructType([field for _, field in fields.values()])
