"""The SQL type each Spark type's values must fit, named as Postgres names them: the language
in which a record-mode handler's rows are checked (spark_jobs.handler_rows) and in which the
Postgres sink creates its columns (spark_jobs.sinks.postgres)."""

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

SQL_TYPES: dict[type[DataType], str] = {
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


def row_columns(schema: StructType) -> list[tuple[str, str]]:
    """(name, SQL type) of each column a handler row is checked against; an output with a type
    outside `SQL_TYPES` (a table format's map, say) is checked by column names only."""
    typed = [(f.name, SQL_TYPES.get(type(f.dataType))) for f in schema.fields]
    if any(t is None for _, t in typed):
        return [(name, "") for name, _ in typed]
    return [(name, t or "") for name, t in typed]
