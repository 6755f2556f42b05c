"""The Postgres sink's tables: a target table and its staging twin keyed by run and task.

Spark tasks write a run's rows to `<table>_staging` tagged with the run id and a task key
(`write_staged`, plain psycopg inside the task); the commit transaction moves them into
`<table>`. A retried task first deletes its own rows, a resumed run clears its staging, so
every result lands in the target exactly once.

Names that reach SQL (the sink table, the output's columns) are quoted with psycopg's
`sql.Identifier`, never pasted in: a column called `a"b` is a column, not an injection. Two
attempts of one task (speculation, an executor wrongly thought lost) serialize on a
per-(run, task) transaction lock, so the staging table holds one attempt's rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg import sql
from sqlalchemy import Connection, Engine, text

from drainer.errors import ConfigError

RUN_COLUMN = "_drainer_run_id"
TASK_COLUMN = "_drainer_task"
STAGING_SUFFIX = "_staging"
INDEX_SUFFIX = "_run"  # the staging table's index: `<table>_staging_run`
MAX_IDENTIFIER_BYTES = 63  # Postgres truncates longer names (NAMEDATALEN - 1)
MAX_TABLE_BYTES = MAX_IDENTIFIER_BYTES - len(STAGING_SUFFIX + INDEX_SUFFIX)


def staging_name(table: str) -> str:
    return f"{table}{STAGING_SUFFIX}"


def check_table_name(table: str) -> str:
    """A sink table whose staging twin or index Postgres would truncate is a config error."""
    size = len(table.encode())
    if size > MAX_TABLE_BYTES:
        raise ValueError(
            f"'{table}' is {size} bytes; with its staging suffix "
            f"'{STAGING_SUFFIX}{INDEX_SUFFIX}' it exceeds Postgres's {MAX_IDENTIFIER_BYTES}-byte "
            f"names: use at most {MAX_TABLE_BYTES} bytes"
        )
    return table


def _q(*names: str) -> str:
    """Names quoted as SQL identifiers, comma-separated."""
    return sql.SQL(", ").join(sql.Identifier(n) for n in names).as_string(None)


def ensure_sink_tables(engine: Engine, table: str, columns: list[tuple[str, str]]) -> None:
    """Create the target and staging tables from (name, postgres type) pairs when missing.

    An existing target whose columns differ from the output is a clear error, not a silent
    mismatch at commit time.
    """
    # the types come from drainer's own Spark-to-Postgres table, never from user text
    ddl = ", ".join(f"{_q(name)} {pg_type}" for name, pg_type in columns)
    staging = staging_name(table)
    with engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {_q(table)} ({ddl}, {_q(RUN_COLUMN)} bigint NOT NULL)"
            )
        )
        conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {_q(staging)} ({ddl}, "
                f"{_q(RUN_COLUMN)} bigint NOT NULL, {_q(TASK_COLUMN)} text NOT NULL)"
            )
        )
        conn.execute(
            text(
                f"CREATE INDEX IF NOT EXISTS {_q(staging + INDEX_SUFFIX)} "
                f"ON {_q(staging)} ({_q(RUN_COLUMN, TASK_COLUMN)})"
            )
        )
        existing = table_columns(conn, table)
    wanted = [name for name, _ in columns]
    if existing != wanted:
        raise ConfigError(
            f"sink table {table} has columns {existing} but the processor outputs {wanted}: "
            f"rename the sink table (sink.table) or migrate {table} to the new columns"
        )


def table_columns(conn: Connection, table: str) -> list[str]:
    """The sink columns of a table (without drainer's own), [] when it does not exist."""
    rows = conn.execute(
        text(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = :t ORDER BY ordinal_position"
        ),
        {"t": table},
    )
    return [r.column_name for r in rows if r.column_name not in (RUN_COLUMN, TASK_COLUMN)]


def publish_staged(conn: Connection, table: str, run_id: int) -> int:
    """Inside the commit transaction: move the run's staged rows into the target table."""
    columns = table_columns(conn, table)
    if not columns:
        return 0
    quoted = _q(*columns, RUN_COLUMN)
    moved = conn.execute(
        text(
            f"INSERT INTO {_q(table)} ({quoted}) "
            f"SELECT {quoted} FROM {_q(staging_name(table))} WHERE {_q(RUN_COLUMN)} = :r"
        ),
        {"r": run_id},
    ).rowcount
    clear_staged(conn, table, run_id)
    return moved


def clear_staged(conn: Connection, table: str, run_id: int) -> None:
    """Drop what any attempt of the run staged (a resumed run starts afresh)."""
    if table_columns(conn, staging_name(table)):
        conn.execute(
            text(f"DELETE FROM {_q(staging_name(table))} WHERE {_q(RUN_COLUMN)} = :r"),
            {"r": run_id},
        )


def clear_task_partition(conn: Any, table: str, run_id: int, topic: str, partition: int) -> None:
    """In a Spark task (psycopg): drop what an earlier attempt staged for one Kafka partition.

    Record mode stages a partition in chunks whose task keys start `topic:partition:`; the
    partition's staged failures go with them.
    """
    conn.execute(
        f'DELETE FROM "{staging_name(table)}" WHERE "{RUN_COLUMN}" = %s '
        f'AND starts_with("{TASK_COLUMN}", %s)',
        (run_id, f"{topic}:{partition}:"),
    )
    conn.execute(
        "DELETE FROM record_failures WHERE run_id = %s AND topic = %s AND partition = %s",
        (run_id, topic, partition),
    )


def staged_rows(conn: Connection, table: str, run_id: int) -> int:
    """Rows the run has staged so far (0 before the staging table exists)."""
    if not conn.scalar(text("SELECT to_regclass(:t)"), {"t": staging_name(table)}):
        return 0
    return conn.scalar(
        text(f"SELECT count(*) FROM {_q(staging_name(table))} WHERE {_q(RUN_COLUMN)} = :r"),
        {"r": run_id},
    )


def write_staged(
    conn: Any, table: str, columns: list[str], run_id: int, task: str, rows: Iterable[tuple]
) -> int:
    """In a Spark task (psycopg): replace this task's staged rows; the caller commits.

    Call `drainer.store.leases.check_fence` first in the same transaction. A second attempt
    of the same task waits here until the first one's transaction ends, then replaces its rows.
    """
    staging = staging_name(table)
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
        (f"drainer-stage:{table}:{run_id}:{task}",),
    )
    conn.execute(
        f"DELETE FROM {_q(staging)} WHERE {_q(RUN_COLUMN)} = %s AND {_q(TASK_COLUMN)} = %s",
        (run_id, task),
    )
    count = 0
    with conn.cursor().copy(
        f"COPY {_q(staging)} ({_q(*columns, RUN_COLUMN, TASK_COLUMN)}) FROM STDIN"
    ) as copy:
        for row in rows:
            copy.write_row((*row, run_id, task))
            count += 1
    return count
