"""Why a record does not decode: the reasons `spark_jobs.decode` puts in `ERROR`, and the
JSON schema they check against.

A JSON reason is built from the record's text again (`from_json` as a map of texts), which
Spark evaluates without generated code: the filters every record passes test
`QUICK_ERROR`, the same reasons with a JSON one left untold (`untold_json`), and a run that
fails on such a record reads it again for its reason (`bad_records.known_bad_record`).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from drainer.config.formats import RecordFormat
from drainer.errors import ConfigError
from drainer.records.json_schema import ddl_of_file

CORRUPT = "_drainer_corrupt"  # from_json's column of a record's text when it does not fit
UNTOLD = "malformed JSON, or JSON that does not fit the schema, in"


def json_schema(fmt: RecordFormat, side: str) -> StructType:
    """A JSON side's schema, from its DDL or its JSON Schema file."""
    path = fmt.schema_path(Path.cwd())
    ddl = ddl_of_file(path) if path is not None else fmt.schema_ or ""
    try:
        schema = DataType.fromDDL(ddl)
    except Exception as err:
        raise ConfigError(f"{side}.schema {ddl!r} is not a Spark DDL struct: {err}") from None
    if not isinstance(schema, StructType):
        raise ConfigError(f"{side}.schema {ddl!r} must list columns, e.g. 'id string'")
    return schema


def error_of(
    fmt: RecordFormat, decoded: Column, first: Column, side: str, reason: bool = True
) -> Column:
    """Why a record's `side` did not decode; null when it did (a null value is a tombstone,
    a null key no key). `reason=False`: a JSON reason untold (`decode.QUICK_ERROR`)."""
    value = F.col(side)
    if fmt.format != "json":  # avro, protobuf: `first` says it
        return F.when(value.isNotNull(), first)
    bad = decoded.isNull() | decoded.getField(CORRUPT).isNotNull()
    return F.when(value.isNull(), F.lit(None).cast("string")).otherwise(
        F.when(bad, _json_error(fmt, decoded, side) if reason else untold_json(side)).otherwise(
            _missing(fmt, decoded, side)
        )
    )


def untold_json(side: str) -> Column:
    """The reason `QUICK_ERROR` gives a record whose JSON `side` does not decode: the run
    that fails on it reads the record again for `ERROR`'s (`bad_records.known_bad_record`)."""
    return F.lit(f"{UNTOLD} the {side}")


def _missing(fmt: RecordFormat, decoded: Column, side: str) -> Column:
    """The required (`NOT NULL`) fields a well-formed record lacks, named; null when none."""
    required = [f.name for f in json_schema(fmt, side).fields if not f.nullable]
    if not required:
        return F.lit(None).cast("string")
    names = F.concat_ws(
        ", ", *[F.when(decoded.getField(name).isNull(), F.lit(name)) for name in required]
    )
    return F.when(names != "", F.concat(F.lit(f"the {side} lacks required "), names))


def _json_error(fmt: RecordFormat, decoded: Column, side: str) -> Column:
    """Malformed JSON, or JSON whose fields do not fit the schema's types, told apart.

    `from_json` keeps the fields that fit (partial results) and the record's text as corrupt
    either way; parsed again as a map of texts, a field that has a value there but none in the
    struct is one whose value does not fit its type: named with its value and type (a record
    `{"order_id": "abc"}` into `order_id bigint` is not malformed JSON).
    """
    schema = json_schema(fmt, side)
    texts = F.from_json(F.col(side).cast("string"), "map<string,string>")
    misfits = [
        F.when(
            texts.getItem(field.name).isNotNull() & decoded.getField(field.name).isNull(),
            F.concat(
                F.lit(f"{field.name} = "),
                F.substring(texts.getItem(field.name), 1, 100),
                F.lit(f" is not {field.dataType.simpleString()}"),
            ),
        )
        for field in schema.fields
    ]
    found = F.concat_ws("; ", *misfits) if misfits else F.lit("")
    return (
        F.when(texts.isNull(), F.lit(f"malformed JSON: the {side} is not a JSON object"))
        .when(found != "", F.concat(F.lit(f"the {side}'s JSON does not fit its schema: "), found))
        .otherwise(F.lit(f"malformed JSON for the {side}'s schema"))
    )
