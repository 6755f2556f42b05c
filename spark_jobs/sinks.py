"""Postgres sink, Spark side: which Postgres column type stores each Spark output type.

The staging writes themselves are `drainer.store.sinks.write_staged`, called inside the tasks.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from drainer.errors import ConfigError

_PG_TYPES: dict[type[DataType], str] = {
    StringType: "text",
    IntegerType: "integer",
    ShortType: "smallint",
    LongType: "bigint",
    DoubleType: "double precision",
    FloatType: "real",
    BooleanType: "boolean",
    TimestampType: "timestamptz",
    TimestampNTZType: "timestamp",
    DateType: "date",
    BinaryType: "bytea",
    DecimalType: "numeric",
}


def pg_columns(schema: StructType) -> list[tuple[str, str]]:
    columns = []
    for f in schema.fields:
        pg_type = _PG_TYPES.get(type(f.dataType))
        if pg_type is None:
            raise ConfigError(
                f"output column {f.name} has Spark type {f.dataType.simpleString()}, which the "
                "Postgres sink cannot store: cast it to a string, number, timestamp or binary"
            )
        columns.append((f.name, pg_type))
    return columns
