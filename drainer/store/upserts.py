"""The Postgres sink's state tables (`sink.write: upsert`): the run's collapsed rows, staged as
an append's are, merged into the target inside the commit transaction.

The target is a plain table with the PRIMARY KEY; `merge_staged` runs one
`INSERT … ON CONFLICT (key) DO UPDATE … WHERE <newer>` from the run's stage (one row per key,
collapsed in Spark), so the rows, the offsets and the offset map commit together. A delete is
the row with `_deleted_at` set (drainer.sinks.upsert says why); the view `<table>_live` shows
the live rows only, and `remove_markers` (`drainer maintain`) drops markers past their
retention.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, text

from drainer.store.sink_names import RUN_COLUMN, fit_name, quote
from drainer.store.sink_tables import forget_tasks, owned_stage, relkind, table_columns

DELETED_AT = "_deleted_at"  # when the delete was merged; null on a live row

# The merge's conditions, one definition for Spark SQL (Delta, Iceberg) and Postgres: the
# dialects differ only in how a name is quoted.
Quote = Callable[[str], str]


def ref(alias: str, path: str, quote: Quote) -> str:
    """`alias.col` or `alias.col.field`, each part quoted."""
    return ".".join([alias, *(quote(p) for p in path.split("."))])


def all_null(alias: str, order: Sequence[str], quote: Quote) -> str:
    """True when every order value of the row is null (a tombstone without an order)."""
    return " AND ".join(f"{ref(alias, c, quote)} IS NULL" for c in order)


def lexically_newer(src: str, dst: str, order: Sequence[str], quote: Quote) -> str:
    """`src` orders after `dst`, comparing `order` left to right (SQL of Spark and Postgres)."""
    terms = []
    for i, column in enumerate(order):
        equal = [f"{ref(src, c, quote)} = {ref(dst, c, quote)}" for c in order[:i]]
        terms.append(
            " AND ".join([*equal, f"{ref(src, column, quote)} > {ref(dst, column, quote)}"])
        )
    return " OR ".join(f"({t})" for t in terms)


def newer(src: str, dst: str, order: Sequence[str], quote: Quote) -> str:
    """The merge condition: the incoming row replaces the table's row.

    An incoming row without order values is the newest (a tombstone deletes what is there);
    a table row without them (the marker of such a tombstone on an unseen key) is the oldest.
    """
    return (
        f"({all_null(src, order, quote)}) OR ({all_null(dst, order, quote)}) "
        f"OR {lexically_newer(src, dst, order, quote)}"
    )


def kept_order(src: str, dst: str, column: str, order: Sequence[str], quote: Quote) -> str:
    """An order column's value after a replace: the table's when the incoming row has none."""
    return (
        f"CASE WHEN {all_null(src, order, quote)} THEN {ref(dst, column, quote)} "
        f"ELSE {ref(src, column, quote)} END"
    )


@dataclass(frozen=True)
class UpsertCounts:
    """What one run's merge did: keys inserted, updated, deleted, versions skipped as older."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "rows_inserted": self.inserted,
            "rows_updated": self.updated,
            "rows_deleted": self.deleted,
            "rows_skipped_older": self.skipped,
        }


COUNT_COLUMNS = ("rows_inserted", "rows_updated", "rows_deleted", "rows_skipped_older")


def store_counts(conn: Connection, run_id: int, counts: UpsertCounts) -> None:
    """Record a Postgres merge's counts inside the transaction that merged (migration 023)."""
    conn.execute(
        text(
            f"INSERT INTO run_upsert_counts (run_id, {', '.join(COUNT_COLUMNS)}) VALUES (:r, "
            f"{', '.join(':' + c for c in COUNT_COLUMNS)}) ON CONFLICT (run_id) DO NOTHING"
        ),
        {"r": run_id, **counts.as_dict()},
    )


def stored_counts(conn: Connection, run_id: int) -> dict[str, int]:
    """A run's merge counts as recorded by a Postgres sink; empty for any other run."""
    return runs_counts(conn, [run_id]).get(run_id, {})


def runs_counts(conn: Connection, run_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """The merge counts a Postgres sink recorded for those of `run_ids` it merged."""
    rows = conn.execute(
        text(
            f"SELECT run_id, {', '.join(COUNT_COLUMNS)} FROM run_upsert_counts "
            "WHERE run_id = ANY(:r)"
        ),
        {"r": list(run_ids)},
    ).all()
    return {r.run_id: {c: int(getattr(r, c)) for c in COUNT_COLUMNS} for r in rows}


def live_view(table: str) -> str:
    """The view of a state table's live rows (no delete markers)."""
    return fit_name(table, "_live")


def primary_key(conn: Connection, table: str) -> list[str] | None:
    """The table's PRIMARY KEY columns in order; None without one (or without the table)."""
    rows = conn.execute(
        text(
            "SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, pos) ON true "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
            "WHERE c.relname = :t AND n.nspname = current_schema() AND i.indisprimary "
            "ORDER BY k.pos"
        ),
        {"t": table},
    ).all()
    return [r.attname for r in rows] or None


def add_primary_key(conn: Connection, table: str, keys: Sequence[str]) -> None:
    """A target just created for upserts gets its key (idempotent)."""
    if primary_key(conn, table) is None:
        conn.execute(text(f"ALTER TABLE {quote(table)} ADD PRIMARY KEY ({quote(*keys)})"))


def _pq(name: str) -> str:
    return quote(name)


def merge_staged(
    conn: Connection, table: str, run_id: int, keys: Sequence[str], order: Sequence[str]
) -> UpsertCounts:
    """Inside the commit transaction: merge the run's stage into the target, drop the stage;
    what it did, counted by the same condition before it runs."""
    stage = owned_stage(conn, table, run_id) if relkind(conn, table) else None
    if stage is None:
        return UpsertCounts()  # nothing staged: the run read no records
    columns = [*table_columns(conn, table), RUN_COLUMN]
    conflict = ", ".join(_pq(k) for k in keys)
    on = " AND ".join(f"t.{_pq(k)} = s.{_pq(k)}" for k in keys)
    applies = f"t.{_pq(keys[0])} IS NULL OR ({newer('s', 't', order, _pq)})"
    live_before = f"t.{_pq(keys[0])} IS NOT NULL AND t.{_pq(DELETED_AT)} IS NULL"
    deleted = f"s.{_pq(DELETED_AT)} IS NOT NULL"
    row = conn.execute(
        text(
            f"SELECT count(*) FILTER (WHERE ({applies}) AND NOT {deleted} AND NOT ({live_before})) "
            f"AS inserted, count(*) FILTER (WHERE ({applies}) AND NOT {deleted} AND "
            f"({live_before})) AS updated, count(*) FILTER (WHERE ({applies}) AND {deleted}) "
            f"AS deleted, count(*) FILTER (WHERE NOT ({applies})) AS skipped "
            f"FROM {quote(stage)} s LEFT JOIN {quote(table)} t ON {on}"
        )
    ).one()
    ordered = set(order)
    sets = ", ".join(
        f"{_pq(c)} = "
        + (kept_order("excluded", "t", c, order, _pq) if c in ordered else f"excluded.{_pq(c)}")
        for c in columns
        if c not in keys
    )
    conn.execute(
        text(
            f"INSERT INTO {quote(table)} AS t ({quote(*columns)}) "
            f"SELECT {quote(*columns)} FROM {quote(stage)} "
            f"ON CONFLICT ({conflict}) DO UPDATE SET {sets} "
            f"WHERE {newer('excluded', 't', order, _pq)}"
        )
    )
    conn.execute(text(f"DROP TABLE {quote(stage)}"))
    forget_tasks(conn, stage)
    conn.execute(
        text(
            f"CREATE OR REPLACE VIEW {quote(live_view(table))} AS SELECT "
            f"{quote(*table_columns(conn, table))} FROM {quote(table)} "
            f"WHERE {_pq(DELETED_AT)} IS NULL"
        )
    )
    return UpsertCounts(int(row.inserted), int(row.updated), int(row.deleted), int(row.skipped))


def remove_markers(conn: Connection, table: str, retention_ms: int) -> int:
    """Delete markers older than the retention (`drainer maintain`); how many went."""
    if relkind(conn, table) is None:
        return 0
    removed = conn.execute(
        text(
            f"DELETE FROM {quote(table)} WHERE {_pq(DELETED_AT)} < "
            "now() - make_interval(secs => :s)"
        ),
        {"s": retention_ms / 1000},
    )
    return int(removed.rowcount or 0)


def markers_past_retention(table: str, cutoff: str, quote_name: Quote) -> str:
    """The Spark SQL statement that drops a lakehouse state table's delete markers merged
    before `cutoff` (a `TIMESTAMP '…'` literal's text): `drainer maintain`'s for Delta and
    Iceberg, as `remove_markers` is Postgres's."""
    return f"DELETE FROM {table} WHERE {quote_name(DELETED_AT)} < TIMESTAMP '{cutoff}'"


def iceberg_state_table(table: str, columns: str, properties: dict[str, str]) -> str:
    """The Spark SQL statement creating an Iceberg state table: `columns` as DDL (the key
    columns NOT NULL, which Iceberg's identifier fields need and a DataFrame-made table
    loses), with its table properties."""
    props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    return f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg TBLPROPERTIES ({props})"
