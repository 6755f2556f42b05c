"""The Postgres sink's tables: a target table and its staging twin keyed by run and task.

Spark tasks write a run's rows to `<table>_staging` tagged with the run id and a task key
(`write_staged`, plain psycopg inside the task); the commit transaction moves them into
`<table>`. A retried task first deletes its own rows, a resumed run clears its staging, so
every result lands in the target exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Engine, text

from drainer.errors import ConfigError

RUN_COLUMN = "_drainer_run_id"
TASK_COLUMN = "_drainer_task"


def staging_name(table: str) -> str:
    return f"{table}_staging"


def ensure_sink_tables(engine: Engine, table: str, columns: list[tuple[str, str]]) -> None:
    """Create the target and staging tables from (name, postgres type) pairs when missing.

    An existing target whose columns differ from the output is a clear error, not a silent
    mismatch at commit time.
    """
    ddl = ", ".join(f'"{name}" {pg_type}' for name, pg_type in columns)
    with engine.begin() as conn:
        conn.execute(
            text(f'CREATE TABLE IF NOT EXISTS "{table}" ({ddl}, "{RUN_COLUMN}" bigint NOT NULL)')
        )
        conn.execute(
            text(
                f'CREATE TABLE IF NOT EXISTS "{staging_name(table)}" ({ddl}, '
                f'"{RUN_COLUMN}" bigint NOT NULL, "{TASK_COLUMN}" text NOT NULL)'
            )
        )
        conn.execute(
            text(
                f'CREATE INDEX IF NOT EXISTS "{staging_name(table)}_run" '
                f'ON "{staging_name(table)}" ("{RUN_COLUMN}", "{TASK_COLUMN}")'
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
    quoted = ", ".join(f'"{c}"' for c in columns)
    moved = conn.execute(
        text(
            f'INSERT INTO "{table}" ({quoted}, "{RUN_COLUMN}") '
            f'SELECT {quoted}, "{RUN_COLUMN}" FROM "{staging_name(table)}" WHERE "{RUN_COLUMN}" = :r'
        ),
        {"r": run_id},
    ).rowcount
    clear_staged(conn, table, run_id)
    return moved


def clear_staged(conn: Connection, table: str, run_id: int) -> None:
    """Drop what any attempt of the run staged (a resumed run starts afresh)."""
    if table_columns(conn, staging_name(table)):
        conn.execute(
            text(f'DELETE FROM "{staging_name(table)}" WHERE "{RUN_COLUMN}" = :r'), {"r": run_id}
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
        text(f'SELECT count(*) FROM "{staging_name(table)}" WHERE "{RUN_COLUMN}" = :r'),
        {"r": run_id},
    )


def write_staged(
    conn: Any, table: str, columns: list[str], run_id: int, task: str, rows: Iterable[tuple]
) -> int:
    """In a Spark task (psycopg): replace this task's staged rows; the caller commits.

    Call `drainer.store.leases.check_fence` first in the same transaction.
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
