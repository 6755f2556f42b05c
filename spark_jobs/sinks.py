"""Postgres sink: Spark tasks COPY rows into the staging table, tagged by run and task.

Each task deletes its own earlier rows first, in the same transaction, so Spark's task retries
and a resumed run never leave a row twice. The commit transaction publishes (drainer.commit).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
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

from drainer.sink_tables import RUN_COLUMN, TASK_COLUMN, staging_name
from drainer.state import FencedOut

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
            raise ValueError(
                f"output column {f.name} has Spark type {f.dataType.simpleString()}, which the "
                "Postgres sink cannot store: cast it to a string, number, timestamp or binary"
            )
        columns.append((f.name, pg_type))
    return columns


def check_fence(conn: psycopg.Connection, drain: str, fence: int | None) -> None:
    """In a task's write transaction: refuse to write for a run whose lease was superseded.

    The share lock makes a new lease (which bumps the fence under a row lock) wait for this
    transaction; after the bump, a zombie run's tasks fail here instead of touching the
    staging of the run that took over. Many tasks of one run hold it side by side.
    """
    if fence is None:
        return
    row = conn.execute("SELECT fence FROM drains WHERE name = %s FOR SHARE", (drain,)).fetchone()
    current = None if row is None else row[0]
    if current != fence:
        raise FencedOut(
            f"run of drain '{drain}' holds fence {fence} but the drain is at {current}: a newer "
            "run took over, so this task does not write its results"
        )


def write_staged(
    conn: psycopg.Connection,
    table: str,
    columns: list[str],
    run_id: int,
    task: str,
    rows: Iterable[tuple[Any, ...]],
) -> int:
    """Replace this task's staged rows; the caller commits (together with anything else).

    Call `check_fence` first in the same transaction.
    """
    staging = staging_name(table)
    conn.execute(
        f'DELETE FROM "{staging}" WHERE "{RUN_COLUMN}" = %s AND "{TASK_COLUMN}" = %s',
        (run_id, task),
    )
    quoted = ", ".join(f'"{c}"' for c in [*columns, RUN_COLUMN, TASK_COLUMN])
    count = 0
    with conn.cursor().copy(f'COPY "{staging}" ({quoted}) FROM STDIN') as copy:
        for row in rows:
            copy.write_row((*row, run_id, task))
            count += 1
    return count
