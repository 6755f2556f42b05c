"""A record-mode handler's rows checked against the sink's columns inside the record's attempt.

A row Postgres cannot store (a string in a `double precision` column) used to reach the stage
table's COPY with its whole chunk and fail the run on every attempt, and a dict key that is not
a column was dropped without a word. Checked here, as part of the handler call, either is that
record's failure: counted in its attempts, dead-lettered at `max_attempts`, the error naming the
column (or key) and the value, while the other records of the run are drained.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from drainer.processing.records import Record

_INT_RANGE = {"smallint": 2**15, "integer": 2**31, "bigint": 2**63}
_NUMBER = (int, float, Decimal)


def checked_rows(
    handler: Callable[[Record], Any], columns: list[tuple[str, str]]
) -> Callable[[Record], list[tuple[Any, ...]]]:
    """`handler`, returning its rows as tuples in `columns` order (name, Postgres type); a row
    that does not fit raises, inside the record's attempt."""
    names = [name for name, _ in columns]

    def handle(record: Record) -> list[tuple[Any, ...]]:
        result = handler(record)
        rows = [] if result is None else result if isinstance(result, list) else [result]
        return [_row(row, names, columns) for row in rows]

    return handle


def _row(row: Any, names: list[str], columns: list[tuple[str, str]]) -> tuple[Any, ...]:
    if isinstance(row, dict):
        extra = [key for key in row if key not in names]
        if extra:
            raise ValueError(
                f"handler row has key {extra[0]!r}, which is not a column of output_schema "
                f"({', '.join(names)}): remove it, or add it to output_schema"
            )
        missing = [name for name in names if name not in row]
        if missing:
            raise ValueError(f"handler row lacks output_schema columns {missing}: {row!r:.200}")
        values = tuple(row[name] for name in names)
    elif isinstance(row, tuple | list):
        values = tuple(row)
        if len(values) != len(names):
            raise ValueError(
                f"handler row has {len(values)} values, output_schema has {len(names)} columns "
                f"({', '.join(names)})"
            )
    else:
        raise ValueError(
            f"handler returned {type(row).__name__} {row!r:.100}: return a dict by column name, "
            "a tuple in output_schema order, a list of them, or None"
        )
    for (name, pg_type), value in zip(columns, values, strict=True):
        problem = _misfit(pg_type, value)
        if problem:
            raise ValueError(
                f"handler row column {name!r} ({pg_type}) got {type(value).__name__} "
                f"{value!r:.100}: {problem}"
            )
    return values


def _misfit(pg_type: str, value: Any) -> str | None:
    """Why Postgres would refuse `value` in a column of `pg_type`, or None when it fits."""
    if value is None:
        return None
    if pg_type == "text":
        ok = not isinstance(value, bytes | bytearray | dict | list)
        return None if ok else "return text (str)"
    if pg_type in _INT_RANGE:
        if isinstance(value, bool) or not isinstance(value, int):
            return "return a whole number (int)"
        bound = _INT_RANGE[pg_type]
        return None if -bound <= value < bound else f"out of {pg_type}'s range"
    if pg_type in ("double precision", "real", "numeric"):
        ok = isinstance(value, _NUMBER) and not isinstance(value, bool)
        return None if ok else "return a number (int, float or Decimal)"
    if pg_type == "boolean":
        return None if isinstance(value, bool) else "return True or False"
    if pg_type in ("timestamptz", "timestamp"):
        return None if isinstance(value, datetime) else "return a datetime"
    if pg_type == "date":
        return None if isinstance(value, date) else "return a date"
    if pg_type == "bytea":
        return None if isinstance(value, bytes | bytearray | memoryview) else "return bytes"
    return None
