"""Names drainer gives the Postgres sink's tables and columns, and how they reach SQL.

Every name that reaches SQL is quoted with psycopg's `sql.Identifier`, never pasted in; names
drainer derives from a sink table (stages, run partitions, folds) are kept within Postgres's
63 bytes by a hash of the table's name, so two long names that share a prefix stay apart.
"""

from __future__ import annotations

import hashlib

RUN_COLUMN = "_drainer_run_id"
TASK_COLUMN = "_drainer_task"
MAX_IDENTIFIER_BYTES = 63  # Postgres truncates longer names (NAMEDATALEN - 1)


# drainer's own tables (sql/*.sql, and the migrations' record): a sink must not write into them,
# and an error about one must not advise migrating it. tests/unit/test_sink_names.py keeps
# this list equal to the tables the migrations create.
OWN_TABLES = frozenset(
    [
        "dead_letters",
        "drain_topics",
        "drains",
        "offset_rewinds",
        "partition_offsets",
        "plan_abandons",
        "record_attempts",
        "record_failures",
        "retention_losses",
        "route_tables",
        "run_commit_details",
        "run_levels",
        "run_ranges",
        "run_stage_tasks",
        "run_table_rows",
        "run_table_commits",
        "run_table_proofs",
        "run_totals",
        "run_upsert_counts",
        "runs",
        "schema_migrations",
    ]
)
# Postgres's reserved key words: usable as table names only in double quotes
RESERVED = frozenset(
    [
        "all",
        "analyse",
        "analyze",
        "and",
        "any",
        "array",
        "as",
        "asc",
        "asymmetric",
        "both",
        "case",
        "cast",
        "check",
        "collate",
        "column",
        "constraint",
        "create",
        "current_catalog",
        "current_date",
        "current_role",
        "current_time",
        "current_timestamp",
        "current_user",
        "default",
        "deferrable",
        "desc",
        "distinct",
        "do",
        "else",
        "end",
        "except",
        "false",
        "fetch",
        "for",
        "foreign",
        "from",
        "grant",
        "group",
        "having",
        "in",
        "initially",
        "intersect",
        "into",
        "lateral",
        "leading",
        "limit",
        "localtime",
        "localtimestamp",
        "not",
        "null",
        "offset",
        "on",
        "only",
        "or",
        "order",
        "placing",
        "primary",
        "references",
        "returning",
        "select",
        "session_user",
        "some",
        "symmetric",
        "system_user",
        "table",
        "then",
        "to",
        "trailing",
        "true",
        "union",
        "unique",
        "user",
        "using",
        "variadic",
        "when",
        "where",
        "window",
        "with",
    ]
)


def check_table_name(table: str) -> str:
    """A sink table name that Postgres would truncate, that only quoted SQL can name, or that
    is one of drainer's own tables, is a config error naming a name that works."""
    size = len(table.encode())
    if size > MAX_IDENTIFIER_BYTES:
        raise ValueError(
            f"'{table}' is {size} bytes, more than Postgres's {MAX_IDENTIFIER_BYTES}-byte "
            f"names: use at most {MAX_IDENTIFIER_BYTES} bytes"
        )
    if table != table.lower():
        raise ValueError(
            f"'{table}' has capitals, so SQL must quote it (\"{table}\") to find it: use "
            f"'{table.lower()}'"
        )
    if table in OWN_TABLES:
        raise ValueError(
            f"'{table}' is one of drainer's own state tables: name the sink table after its "
            f"data, e.g. '{table}_out'"
        )
    if table in RESERVED:
        raise ValueError(
            f"'{table}' is a reserved SQL word, so SQL must quote it to find it: use e.g. "
            f"'{table}s' or '{table}_out'"
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
    from psycopg import sql

    return sql.SQL(", ").join(sql.Identifier(n) for n in names).as_string(None)


def literal(value: str) -> str:
    """A string as an SQL literal, for DDL (COMMENT ON …), which takes no parameters."""
    from psycopg import sql

    return sql.Literal(value).as_string(None)


def stage_name(table: str, run_id: int) -> str:
    """The run's stage table: `<table>_r<run id>` (shortened with a hash past 63 bytes)."""
    return fit_name(table, f"_r{int(run_id)}")


def stage_comment(table: str, run_id: int) -> str:
    """The comment that marks a stage table as drainer's own (its record of ownership); it
    stays on the table once the stage is the run's partition."""
    return f"drainer stage of {table} run {int(run_id)}"
