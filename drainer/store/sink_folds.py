"""Folding a partitioned sink target's run partitions into fewer, larger range partitions.

A fold replaces consecutive partitions (drainer.store.sink_partitions) by one partition
`FOR VALUES FROM (<first run>) TO (<last run> + 1)` under the table runs attach to, in one
transaction, so it happens once or not at all (a crash rolls it back whole):

1. the new partition is created `LIKE` the target with its indexes and a `CHECK` that is
   exactly its future partition constraint;
2. the sources are locked against writes (`SHARE`, readers go on) and their rows copied in;
3. under a short `lock_timeout`, the target is locked `ACCESS EXCLUSIVE` (from here to the
   commit, readers wait), the sources detached, the new partition attached — its `CHECK`
   proves the constraint, so Postgres skips the validation scan and its indexes are adopted,
   not built — and the sources dropped.

So readers wait only for catalog changes, never for the copy. A LIST target of an earlier
version has its listed partitions folded the same way: into bigger LIST partitions while it has
no `<table>_runs`, then all of them at once into `<table>_runs` (drainer.lifecycle.upkeep
says why). Which partitions to fold is not decided here; this module folds a set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Connection, text

from drainer.store.sink_names import RUN_COLUMN, fit_name, literal, quote
from drainer.store.sink_partitions import SinkPartition, fold_comment, runs_parent

FOLD_CHECK = "drainer_fold_runs"  # the constraint that spares the attach's validation scan


def fold_name(table: str, first: int, last: int, taken: Sequence[str] = ()) -> str:
    """`<table>_runs_<first>_<last>` (shortened with a hash past 63 bytes), suffixed when one
    of the sources (`taken`) already has that name."""
    name = fit_name(table, f"_runs_{int(first)}_{int(last)}")
    return name if name not in taken else fit_name(table, f"_runs_{int(first)}_{int(last)}_b")


def list_fold_name(table: str, first: int, last: int) -> str:
    """`<table>_f<first>_<last>`: a LIST fold, as earlier versions named theirs."""
    return fit_name(table, f"_f{int(first)}_{int(last)}")


def fold(
    conn: Connection,
    table: str,
    sources: Sequence[SinkPartition],
    lock_timeout_s: float,
    checkpoint: Callable[[str], None] = lambda point: None,
    listed: bool = False,
) -> SinkPartition:
    """Inside the caller's transaction: replace `sources` by one partition with all their rows.

    By range under the target's runs parent (sink_partitions.ensure_runs_parent); the sources
    must then be every partition whose range meets theirs (maintain.choose_fold picks them so).
    `listed`: a LIST partition of an earlier version's target listing all the sources' run ids,
    only while that target has no runs parent (maintain.choose_list_fold).
    `checkpoint` is called after the copy ("fold_copied") and after the swap ("fold_swapped"),
    before the caller commits: the crash tests end the process there. Waiting longer than
    `lock_timeout_s` for the target's readers raises (psycopg LockNotAvailable); nothing is
    changed then, and the next fold tries again.
    """
    parent = table if listed else runs_parent(conn, table)
    if parent is None:
        raise ValueError(f"sink table {table} has no partition that holds runs by range")
    first, last = min(p.first for p in sources), max(p.last for p in sources)
    runs = sum(p.runs for p in sources)
    run = quote(RUN_COLUMN)
    if listed:
        ids = tuple(sorted(i for p in sources for i in p.run_ids))
        values = ", ".join(str(int(i)) for i in ids)
        name, bound = list_fold_name(table, first, last), f"IN ({values})"
        check = f"{run} = ANY (ARRAY[{values}]::bigint[])"
    else:
        ids = ()
        name = fold_name(table, first, last, [p.name for p in sources])
        bound = f"FROM ({int(first)}) TO ({int(last) + 1})"
        check = f"{run} >= {int(first)} AND {run} < {int(last) + 1}"
    folded = SinkPartition(name, first, last, runs, 0, listed, parent, ids)
    conn.execute(
        text(
            f"CREATE TABLE {quote(name)} (LIKE {quote(table)} INCLUDING ALL, "
            f"CONSTRAINT {quote(FOLD_CHECK)} CHECK ({run} IS NOT NULL AND {check}))"
        )
    )
    if not listed:
        conn.execute(
            text(f"COMMENT ON TABLE {quote(name)} IS {literal(fold_comment(table, runs))}")
        )
    columns = quote(*_columns(conn, table))
    for source in sources:
        conn.execute(text(f"LOCK TABLE {quote(source.name)} IN SHARE MODE"))
        conn.execute(
            text(
                f"INSERT INTO {quote(name)} ({columns}) SELECT {columns} FROM {quote(source.name)}"
            )
        )
    checkpoint("fold_copied")
    conn.execute(text(f"SET LOCAL lock_timeout = '{int(lock_timeout_s * 1000)}ms'"))
    # the target first, then its runs parent: the order a commit locks them in (attach_run)
    for locked in dict.fromkeys([table, parent]):
        conn.execute(text(f"LOCK TABLE ONLY {quote(locked)} IN ACCESS EXCLUSIVE MODE"))
    for source in sources:
        conn.execute(
            text(f"ALTER TABLE {quote(source.parent)} DETACH PARTITION {quote(source.name)}")
        )
    conn.execute(
        text(f"ALTER TABLE {quote(parent)} ATTACH PARTITION {quote(name)} FOR VALUES {bound}")
    )
    for source in sources:
        conn.execute(text(f"DROP TABLE {quote(source.name)}"))
    checkpoint("fold_swapped")
    return folded


def _columns(conn: Connection, table: str) -> list[str]:
    """Every live column of the target, drainer's run column included, in order."""
    return list(
        conn.execute(
            text(
                "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relname = :t AND n.nspname = current_schema() "
                "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
            ),
            {"t": table},
        ).scalars()
    )
