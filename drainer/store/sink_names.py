"""Names drainer gives the Postgres sink's tables and columns, and how they reach SQL.

Every name that reaches SQL is quoted with psycopg's `sql.Identifier`, never pasted in; names
drainer derives from a sink table (stages, run partitions, folds) are kept within Postgres's
63 bytes by a hash of the table's name, so two long names that share a prefix stay apart.
"""

from __future__ import annotations

import hashlib

from psycopg import sql

RUN_COLUMN = "_drainer_run_id"
TASK_COLUMN = "_drainer_task"
MAX_IDENTIFIER_BYTES = 63  # Postgres truncates longer names (NAMEDATALEN - 1)


def check_table_name(table: str) -> str:
    """A sink table name Postgres would truncate is a config error (stage names fit anyway)."""
    size = len(table.encode())
    if size > MAX_IDENTIFIER_BYTES:
        raise ValueError(
            f"'{table}' is {size} bytes, more than Postgres's {MAX_IDENTIFIER_BYTES}-byte "
            f"names: use at most {MAX_IDENTIFIER_BYTES} bytes"
        )
    return table


def fit_name(base: str, suffix: str) -> str:
    """`base + suffix`, or when that exceeds 63 bytes, a shortened base, a hash of it, the suffix.

    The hash is of the whole base, so two long names that share a prefix stay apart.
    """
    name = base + suffix
    if len(name.encode()) <= MAX_IDENTIFIER_BYTES:
        return name
    digest = "_" + hashlib.sha256(base.encode()).hexdigest()[:8]
    keep = MAX_IDENTIFIER_BYTES - len(suffix.encode()) - len(digest)
    return base.encode()[:keep].decode(errors="ignore") + digest + suffix


def quote(*names: str) -> str:
    """Names quoted as SQL identifiers, comma-separated."""
    return sql.SQL(", ").join(sql.Identifier(n) for n in names).as_string(None)


def literal(value: str) -> str:
    """A string as an SQL literal, for DDL (COMMENT ON …), which takes no parameters."""
    return sql.Literal(value).as_string(None)


def stage_name(table: str, run_id: int) -> str:
    """The run's stage table: `<table>_r<run id>` (shortened with a hash past 63 bytes)."""
    return fit_name(table, f"_r{int(run_id)}")


def stage_comment(table: str, run_id: int) -> str:
    """The comment that marks a stage table as drainer's own (its record of ownership); it
    stays on the table once the stage is the run's partition."""
    return f"drainer stage of {table} run {int(run_id)}"
