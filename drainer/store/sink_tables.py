"""The Postgres sink's tables: a target table and, per run, a stage table that becomes its part.

Spark tasks write a run's rows into the run's own stage table, `<table>_r<run id>` (tagged
with a task key; `write_staged`, plain psycopg inside the task), which the driver creates
before the tasks start (`ensure_sink_tables`). The commit transaction publishes it
(`publish_staged`) without copying the rows again when the target is partitioned:

- a target drainer creates is `PARTITION BY RANGE (_drainer_run_id)` (`sink.publish: attach`);
  the stage carries `CHECK (_drainer_run_id = <run>)`, so publishing is `DROP COLUMN
  _drainer_task` (catalog only) and `ATTACH PARTITION … FOR VALUES FROM (<run>) TO (<run> + 1)`,
  which that constraint spares the validation scan and which takes only SHARE UPDATE EXCLUSIVE
  on the target: readers are never blocked. A run that staged nothing drops its stage instead.
  Targets of earlier versions (`PARTITION BY LIST`) and run ids inside a folded range are
  handled by drainer.store.sink_partitions.
- a plain target (one made before partitioned targets existed, or `sink.publish: copy`) gets
  the rows copied (`INSERT … SELECT`) and the stage dropped.

Which of the two happens is the target's own kind (`pg_class.relkind`), not the setting, so a
target converted by hand just works. A retried task first deletes its own rows, a resumed run
empties its stage (TRUNCATE), an abandoned run drops it: every result lands once. Rows a run
left in the shared `<table>_staging` of earlier versions are handled alike (deleted on resume
and abandon, published by the commit), so an upgrade in the middle of a run loses nothing.

drainer only truncates, drops or attaches tables it made: a stage carries the table comment
`drainer stage of <table> run <id>` (`stage_comment`); a table that merely has a stage's name is
refused with an error, untouched. A stage made before the comment existed is recognised by
drainer's own two columns (`_drainer_run_id`, `_drainer_task`), which also mark the legacy
`<table>_staging`; a `<table>_staging` without them is someone else's table and left alone.

Names that reach SQL (the sink table, the output's columns) are quoted with psycopg's
`sql.Identifier`, never pasted in: a column called `a"b` is a column, not an injection. Two
attempts of one task (speculation, an executor wrongly thought lost) serialize on a
per-(run, task) transaction lock, so the stage holds one attempt's rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Engine, text

from drainer.errors import ConfigError
from drainer.store import sink_partitions
from drainer.store.dead_letters import clear_partition_failures
from drainer.store.runs import note_columns_added
from drainer.store.sink_names import (
    MAX_IDENTIFIER_BYTES,
    RUN_COLUMN,
    TASK_COLUMN,
    literal,
    quote,
    stage_comment,
    stage_name,
)

log = logging.getLogger(__name__)

LEGACY_STAGING_SUFFIX = "_staging"  # the one shared staging table of earlier versions
PUBLISH_MODES = ("attach", "copy")


def legacy_staging_name(table: str) -> str | None:
    """Earlier versions' shared staging table; None when the name could never have existed."""
    name = table + LEGACY_STAGING_SUFFIX
    return name if len(name.encode()) <= MAX_IDENTIFIER_BYTES else None


def relkind(conn: Connection, table: str) -> str | None:
    """'p' (partitioned), 'r' (plain) … for a table of the current schema; None when missing.

    Looked up by exact name, not through `to_regclass`, which would fold `MyTable` to lower case.
    """
    found = conn.scalar(
        text(
            "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = :t AND n.nspname = current_schema()"
        ),
        {"t": table},
    )
    return None if found is None else str(found)


def ensure_sink_tables(
    engine: Engine,
    table: str,
    columns: list[tuple[str, str]],
    run_id: int,
    partitioned: bool = True,
) -> None:
    """Create the target (when missing) and the run's stage table, from (name, type) pairs.

    A new target is partitioned by run when `partitioned` (`sink.publish: attach`), plain
    otherwise; an existing one gains the output's new columns (`_evolve`), and a column whose
    type changed is a clear error, not a silent mismatch at commit time. The stage is made
    `LIKE` the target, so its columns and types are the target's exactly, as attaching needs.
    """
    # the types come from drainer's own Spark-to-Postgres table, never from user text
    ddl = ", ".join(f"{quote(name)} {pg_type}" for name, pg_type in columns)
    partition = f" PARTITION BY RANGE ({quote(RUN_COLUMN)})" if partitioned else ""
    with engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {quote(table)} "
                f"({ddl}, {quote(RUN_COLUMN)} bigint NOT NULL){partition}"
            )
        )
        added = _evolve(conn, table, columns)
        if added:  # on record with the change itself (same transaction)
            note_columns_added(conn, run_id, added)
            log.warning(
                "sink table %s: added columns %s (new fields of the output)",
                table,
                ", ".join(added),
            )
        _default_run(conn, _create_stage(conn, table, run_id), run_id)


# a column of the first type is stored in a table column of the second without loss
_WIDER = {("integer", "bigint"), ("smallint", "integer"), ("smallint", "bigint")}
_WIDER |= {("real", "double precision")}
# drainer's names for Postgres types, as format_type() spells them
_SPELLED = {
    "timestamptz": "timestamp with time zone",
    "timestamp": "timestamp without time zone",
}


def _evolve(conn: Connection, table: str, columns: list[tuple[str, str]]) -> list[str]:
    """Additive schema evolution: output columns the table lacks are added (nullable, so its
    earlier rows read null); a column the output lacks stays, null in the new rows. An output
    column whose type the table's column cannot hold is a ConfigError naming it, before
    anything is staged. Returns the added columns' names."""
    existing = table_column_types(conn, table)
    for name, pg_type in columns:
        have = existing.get(name)
        want = _SPELLED.get(pg_type, pg_type)
        if have is not None and have != want and (want, have) not in _WIDER:
            raise ConfigError(
                f"output column {name} is {want}, but the sink table {table} stores it as "
                f"{have}: an incompatible change; nothing was committed: cast it to {have} in "
                "the processor, or write to a new table (sink.table)"
            )
    added = [(name, pg_type) for name, pg_type in columns if name not in existing]
    for name, pg_type in added:
        # the types come from drainer's own Spark-to-Postgres table, never from user text
        conn.execute(text(f"ALTER TABLE {quote(table)} ADD COLUMN {quote(name)} {pg_type}"))
    return [name for name, _ in added]


def table_column_types(conn: Connection, table: str) -> dict[str, str]:
    """The sink columns of a table (without drainer's own) and their types as Postgres
    spells them (`format_type`); empty when the table does not exist."""
    rows = conn.execute(
        text(
            "SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = :t AND n.nspname = current_schema() AND a.attnum > 0 "
            "AND NOT a.attisdropped ORDER BY a.attnum"
        ),
        {"t": table},
    )
    return {r.name: r.type for r in rows if r.name not in (RUN_COLUMN, TASK_COLUMN)}


def _has_drainer_columns(conn: Connection, name: str) -> bool:
    found = conn.scalar(
        text(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = :t AND column_name IN (:run, :task)"
        ),
        {"t": name, "run": RUN_COLUMN, "task": TASK_COLUMN},
    )
    return bool(found == 2)


def owned_stage(conn: Connection, table: str, run_id: int) -> str | None:
    """The run's stage table when it exists, None when not; ConfigError when it is not drainer's.

    Every step that empties, drops or attaches a stage asks here first, so a table that only
    shares the name (`<table>_r<id>`) is never touched.
    """
    stage = stage_name(table, run_id)
    row = conn.execute(
        text(
            "SELECT obj_description(c.oid, 'pg_class') AS comment FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = :t AND n.nspname = current_schema()"
        ),
        {"t": stage},
    ).first()
    if row is None:
        return None
    if row.comment == stage_comment(table, run_id):
        return stage
    if row.comment is None and _has_drainer_columns(conn, stage):
        return stage  # staged by a version before the comment
    raise ConfigError(
        f"table {stage} has the name of run {int(run_id)}'s stage for sink table {table}, but "
        f"drainer did not create it (its comment is not '{stage_comment(table, run_id)}'): "
        f"drainer leaves it untouched; rename that table (ALTER TABLE {quote(stage)} RENAME TO …) "
        "and run again, or give the drain another sink.table"
    )


def _create_stage(conn: Connection, table: str, run_id: int) -> str:
    """The run's stage table, created when missing: the target's columns, the task, the CHECK."""
    stage = stage_name(table, run_id)
    if owned_stage(conn, table, run_id) is not None:
        return stage
    conn.execute(
        text(
            f"CREATE TABLE {quote(stage)} (LIKE {quote(table)}, "
            f"{quote(TASK_COLUMN)} text NOT NULL, CHECK ({quote(RUN_COLUMN)} = {int(run_id)}))"
        )
    )
    conn.execute(
        text(f"COMMENT ON TABLE {quote(stage)} IS {literal(stage_comment(table, run_id))}")
    )
    # no index on the task column: a task finds its earlier attempts in `run_stage_tasks`
    return stage


def _default_run(conn: Connection, stage: str, run_id: int) -> None:
    """The stage's run column defaults to its run, so a COPY of CSV leaves it out (one field
    less per row to write and parse). Set on every stage the driver prepares, one made by an
    earlier version too; a stage without it would refuse such a COPY (the column is NOT NULL),
    never take a null."""
    conn.execute(
        text(
            f"ALTER TABLE {quote(stage)} ALTER COLUMN {quote(RUN_COLUMN)} SET DEFAULT {int(run_id)}"
        )
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
    """Inside the commit transaction: make the run's staged rows part of the target.

    Partitioned target: the stage becomes the run's partition (no row is copied); plain
    target: the rows are copied in. Either way the stage is gone afterwards. Returns the rows
    published.
    """
    kind = relkind(conn, table)
    if kind is None:
        return 0  # nothing was ever staged: the run read no records
    adopted = _adopt_legacy_rows(conn, table, run_id)
    stage = owned_stage(conn, table, run_id)
    if stage is None:
        return 0
    rows = None if adopted else _tasks_rows(conn, stage)
    if rows is None:
        rows = conn.scalar(text(f"SELECT count(*) FROM {quote(stage)}"))
    forget_tasks(conn, stage)  # it stops being a stage either way
    if kind == "p" and rows:
        conn.execute(text(f"ALTER TABLE {quote(stage)} DROP COLUMN {quote(TASK_COLUMN)}"))
        if sink_partitions.attach_run(conn, table, stage, run_id):
            return int(rows)
    if rows:  # a plain target, or a run id inside a folded range
        quoted = quote(*table_columns(conn, table), RUN_COLUMN)
        conn.execute(
            text(f"INSERT INTO {quote(table)} ({quoted}) SELECT {quoted} FROM {quote(stage)}")
        )
    conn.execute(text(f"DROP TABLE {quote(stage)}"))  # published, or no partition for no rows
    return int(rows)


def _legacy_staging(conn: Connection, table: str) -> str | None:
    """Earlier versions' `<table>_staging` when it exists and has drainer's columns, else None."""
    legacy = legacy_staging_name(table)
    if legacy is None or relkind(conn, legacy) is None:
        return None
    return legacy if _has_drainer_columns(conn, legacy) else None


def _tasks_rows(conn: Connection, stage: str) -> int | None:
    """The rows the stage's tasks recorded with their COPYs; None when a task recorded none
    (one of an earlier version) or no task is on record (rows staged otherwise): count then."""
    row = conn.execute(
        text(
            "SELECT count(*) AS tasks, count(rows) AS counted, sum(rows) AS rows "
            "FROM run_stage_tasks WHERE stage = :s"
        ),
        {"s": stage},
    ).one()
    if not row.tasks or row.counted != row.tasks:
        return None
    return int(row.rows)


def _adopt_legacy_rows(conn: Connection, table: str, run_id: int) -> bool:
    """Move rows of this run that an earlier version staged in `<table>_staging` into its
    stage; whether there were any.

    Only a run staged before an upgrade and committed after it without executing again has
    any (a resumed run that executes deletes them first, `clear_staged`).
    """
    legacy = _legacy_staging(conn, table)
    if legacy is None:
        return False
    found = conn.scalar(
        text(f"SELECT EXISTS (SELECT FROM {quote(legacy)} WHERE {quote(RUN_COLUMN)} = :r)"),
        {"r": run_id},
    )
    if not found:
        return False
    stage = _create_stage(conn, table, run_id)
    quoted = quote(*table_columns(conn, table), RUN_COLUMN, TASK_COLUMN)
    conn.execute(
        text(
            f"INSERT INTO {quote(stage)} ({quoted}) "
            f"SELECT {quoted} FROM {quote(legacy)} WHERE {quote(RUN_COLUMN)} = :r"
        ),
        {"r": run_id},
    )
    _clear_legacy(conn, table, run_id)
    return True


def _clear_legacy(conn: Connection, table: str, run_id: int) -> None:
    legacy = _legacy_staging(conn, table)
    if legacy is not None:
        conn.execute(
            text(f"DELETE FROM {quote(legacy)} WHERE {quote(RUN_COLUMN)} = :r"), {"r": run_id}
        )


def clear_staged(conn: Connection, table: str, run_id: int) -> None:
    """A resumed run starts afresh: empty what any earlier attempt of it staged."""
    stage = owned_stage(conn, table, run_id)
    if stage is not None:
        conn.execute(text(f"TRUNCATE {quote(stage)}"))
        forget_tasks(conn, stage)
    _clear_legacy(conn, table, run_id)


def drop_staged(conn: Connection, table: str, run_id: int) -> None:
    """An abandoned run: drop its stage table (and its rows in a legacy staging table)."""
    stage = owned_stage(conn, table, run_id)
    if stage is not None:
        conn.execute(text(f"DROP TABLE {quote(stage)}"))
        forget_tasks(conn, stage)
    _clear_legacy(conn, table, run_id)


def forget_tasks(conn: Connection, stage: str) -> None:
    """The stage's tasks off record, with its rows (emptied or dropped in the same
    transaction): a run that stages into it again starts without earlier attempts."""
    conn.execute(text("DELETE FROM run_stage_tasks WHERE stage = :s"), {"s": stage})


def clear_task_partition(
    conn: Any, table: str, run_id: int, topic: str, partition: int, attempt: int = 0
) -> None:
    """In a Spark task (psycopg): drop what an earlier attempt staged for one Kafka partition.

    Record mode stages a partition in chunks whose task keys start `topic:partition:`; the
    partition's staged failures go with them.
    """
    stage, prefix = stage_name(table, run_id), f"{topic}:{partition}:"
    conn.execute(
        f"DELETE FROM {quote(stage)} WHERE starts_with({quote(TASK_COLUMN)}, %s)", (prefix,)
    )
    conn.execute(  # their records go with them, or the commit would sum their rows
        "DELETE FROM run_stage_tasks WHERE stage = %s AND starts_with(task, %s)", (stage, prefix)
    )
    clear_partition_failures(conn, run_id, topic, partition, attempt)


def staged_rows(conn: Connection, table: str, run_id: int) -> int:
    """Rows the run has staged so far (0 before its stage table exists)."""
    stage = stage_name(table, run_id)
    if relkind(conn, stage) is None:
        return 0
    return int(conn.scalar(text(f"SELECT count(*) FROM {quote(stage)}")) or 0)


def write_staged(
    conn: Any,
    table: str,
    columns: list[str],
    run_id: int,
    task: str,
    rows: Iterable[tuple[Any, ...]],
) -> int:
    """In a Spark task (psycopg): replace this task's staged rows; the caller commits.

    Call `drainer.store.leases.check_fence` first in the same transaction. A second attempt
    of the same task waits here until the first one's transaction ends, then replaces its rows.
    """
    stage = _replace_task_rows(conn, table, run_id, task)
    count = 0
    with conn.cursor().copy(_copy_into(stage, [*columns, RUN_COLUMN])) as copy:
        for row in rows:
            copy.write_row((*row, run_id, task))
            count += 1
    _record_rows(conn, stage, task, count)
    return count


def write_staged_csv(
    conn: Any,
    table: str,
    columns: list[str],
    run_id: int,
    task: str,
    chunks: Iterable[tuple[Any, int]],
) -> int:
    """`write_staged` for rows already encoded as CSV, each chunk (a bytes-like block of whole
    lines, the task column last) with its row count: no Python object per row. The run
    column is left to the stage's default (`_default_run`)."""
    stage = _replace_task_rows(conn, table, run_id, task)
    count = 0
    with conn.cursor().copy(f"{_copy_into(stage, columns)} (FORMAT csv)") as copy:
        for data, rows in chunks:
            copy.write(data)
            count += rows
    _record_rows(conn, stage, task, count)
    return count


def _copy_into(stage: str, columns: list[str]) -> str:
    """The COPY of a task's rows into the stage: the given columns, then the task."""
    return f"COPY {quote(stage)} ({quote(*columns, TASK_COLUMN)}) FROM STDIN"


def _record_rows(conn: Any, stage: str, task: str, rows: int) -> None:
    """The task's row count beside its record, committed with its rows: the commit sums
    these (`_tasks_rows`) instead of scanning the stage."""
    conn.execute(
        "UPDATE run_stage_tasks SET rows = %s WHERE stage = %s AND task = %s", (rows, stage, task)
    )


def _replace_task_rows(conn: Any, table: str, run_id: int, task: str) -> str:
    """Lock the task's rows of the run's stage (a retried task waits for its first attempt),
    record that the task staged, and delete what an earlier attempt of it staged; the stage's
    name. Only a task that finds itself on record already deletes: without an index on the
    task column (whose upkeep doubled every COPY) that is a scan of the stage, which a first
    attempt, the usual case, never pays."""
    stage = stage_name(table, run_id)
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
        (f"drainer-stage:{table}:{run_id}:{task}",),
    )
    first = conn.execute(
        "INSERT INTO run_stage_tasks (stage, task) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (stage, task),
    ).rowcount
    if not first:
        conn.execute(f"DELETE FROM {quote(stage)} WHERE {quote(TASK_COLUMN)} = %s", (task,))
    return stage
