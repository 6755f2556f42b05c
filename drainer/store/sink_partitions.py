"""Where a partitioned sink target keeps its runs: range partitions by run id.

A target drainer creates is `PARTITION BY RANGE (_drainer_run_id)`. A run's commit attaches the
run's stage as `FOR VALUES FROM (<run>) TO (<run> + 1)`, and folds (drainer.store.sink_folds)
later replace consecutive partitions by one `FROM (<first>) TO (<last> + 1)`. A range bound is
two numbers however many runs it covers, so partitions can hold any number of runs and the
count stays logarithmic in the runs (drainer.lifecycle.upkeep).

Targets made by earlier versions are `PARTITION BY LIST (_drainer_run_id)`, with partitions
that list their run ids. A LIST bound is stored in the partition's `pg_class` row, which
Postgres does not TOAST, so it cannot list more than about 800 runs, and such a target could
only grow. Rather than replacing the target, which would change what readers' views and grants
point at, drainer gives it one DEFAULT partition, `<table>_runs`, itself partitioned by range:
new runs attach there, and folds move the listed partitions' rows into it. Readers see the same
table and rows throughout.

When a run id falls inside a range a fold already covers (a run of another drain sharing the
target, or a resumed plan, committing after newer runs were folded), its partition cannot be
attached; the commit then copies its rows in instead, in the same transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from psycopg.errors import UndefinedTable
from sqlalchemy import Connection, text
from sqlalchemy.exc import ProgrammingError

from drainer.errors import ConfigError
from drainer.store.sink_names import RUN_COLUMN, fit_name, literal, quote

_NUMBER = re.compile(r"-?\d+")
_FOLD_COMMENT = re.compile(r"^drainer fold of .*: (\d+) runs?$")
_STAGE_COMMENT = re.compile(r"^drainer stage of .* run \d+$")


@dataclass(frozen=True)
class SinkPartition:
    """One partition of a target: the run ids its bound admits (`first` to `last`) and how many
    runs' rows it holds (`runs`, what its tier is counted from)."""

    name: str
    first: int
    last: int
    runs: int = 1
    bytes: int = 0  # on disk, indexes included: what folding it copies and indexes again
    listed: bool = False  # a LIST partition of a target made by an earlier version
    parent: str = ""  # the table it is attached to: the target, or its `<table>_runs`
    run_ids: tuple[int, ...] = ()  # a listed partition's run ids, ascending

    def tier(self, fanout: int) -> int:
        """0 for a run's own partition, k for one that holds about fanout**k runs."""
        tier = 0
        while fanout ** (tier + 1) <= self.runs:
            tier += 1
        return tier


def runs_parent_name(table: str) -> str:
    """The DEFAULT partition that holds a LIST target's runs by range: `<table>_runs`."""
    return fit_name(table, "_runs")


def runs_parent_comment(table: str) -> str:
    return f"drainer run partitions of {table}"


def fold_comment(table: str, runs: int) -> str:
    """Marks a fold as drainer's and says how many runs it holds (its bound cannot)."""
    return f"drainer fold of {table}: {int(runs)} runs"


def _strategy(conn: Connection, table: str) -> tuple[str | None, str | None, str | None]:
    """(partition strategy 'r'/'l'/None, DEFAULT partition's name, its comment) of a target."""
    row = conn.execute(
        text(
            "SELECT pt.partstrat AS strategy, d.relname AS default_name, "
            "obj_description(d.oid, 'pg_class') AS default_comment "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_partitioned_table pt ON pt.partrelid = c.oid "
            "LEFT JOIN pg_class d ON d.oid = pt.partdefid "
            "WHERE c.relname = :t AND n.nspname = current_schema()"
        ),
        {"t": table},
    ).first()
    if row is None:
        return None, None, None
    return str(row.strategy), row.default_name, row.default_comment


def runs_parent(conn: Connection, table: str) -> str | None:
    """The table runs attach to by range: the target itself, or a LIST target's `<table>_runs`;
    None for a LIST target that has none yet (its runs attach by LIST, as before)."""
    strategy, default, comment = _strategy(conn, table)
    if strategy == "r":
        return table
    if strategy == "l" and default is not None and comment == runs_parent_comment(table):
        return str(default)
    return None


def ensure_runs_parent(conn: Connection, table: str) -> str | None:
    """`runs_parent`, giving a LIST target its `<table>_runs` first (see the module docstring).

    None for a target that is not partitioned. A DEFAULT partition drainer did not make is a
    ConfigError: attaching `<table>_runs` is impossible beside it, and LIST folds would scan it.
    """
    strategy, default, _ = _strategy(conn, table)
    found = runs_parent(conn, table)
    if found is not None or strategy != "l":
        return found
    if default is not None:
        raise ConfigError(
            f"sink table {table} has a DEFAULT partition, {default}, that drainer did not make, "
            f"so drainer cannot give it {runs_parent_name(table)} and does not fold its "
            f"partitions: move {default}'s rows into the table's other partitions and detach it "
            f"(ALTER TABLE {quote(table)} DETACH PARTITION {quote(default)})"
        )
    parent = runs_parent_name(table)
    conn.execute(
        text(
            f"CREATE TABLE {quote(parent)} (LIKE {quote(table)} INCLUDING ALL) "
            f"PARTITION BY RANGE ({quote(RUN_COLUMN)})"
        )
    )
    conn.execute(text(f"COMMENT ON TABLE {quote(parent)} IS {literal(runs_parent_comment(table))}"))
    conn.execute(text(f"ALTER TABLE {quote(table)} ATTACH PARTITION {quote(parent)} DEFAULT"))
    return parent


def partitions(
    conn: Connection, table: str, sizes: bool = True, parent: str | None = None
) -> list[SinkPartition]:
    """The target's partitions that hold runs, by their first run id (none for a plain table).

    Those of a LIST target are listed; those of its `<table>_runs` and of a RANGE target are
    ranges. A range partition drainer did not make counts as holding every run of its range.
    `parent`: the target's runs parent when the caller has looked it up already.
    """
    parents = [table]
    parent = parent or runs_parent(conn, table)
    if parent is not None and parent != table:
        parents.append(parent)
    size = "coalesce(pg_total_relation_size(c.oid), 0)" if sizes else "0"
    rows = conn.execute(
        text(
            "SELECT c.relname, p.relname AS parent, pg_get_expr(c.relpartbound, c.oid) AS bound, "
            f"obj_description(c.oid, 'pg_class') AS comment, {size} AS bytes "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent "
            "JOIN pg_namespace n ON n.oid = p.relnamespace "
            "WHERE p.relname = ANY(:parents) AND n.nspname = current_schema() "
            "AND c.relkind = 'r'"
        ),
        {"parents": parents},
    ).all()
    found = []
    for row in rows:
        part = _partition(row.relname, row.parent, row.bound, row.comment, int(row.bytes))
        if part is not None:
            found.append(part)
    return sorted(found, key=lambda p: p.first)


def _partition(
    name: str, parent: str, bound: str, comment: str | None, size: int
) -> SinkPartition | None:
    if bound.startswith("FOR VALUES IN"):
        ids = tuple(sorted({int(n) for n in _NUMBER.findall(bound)}))
        if not ids:
            return None
        return SinkPartition(name, ids[0], ids[-1], len(ids), size, True, parent, ids)
    if not bound.startswith("FOR VALUES FROM") or "MINVALUE" in bound or "MAXVALUE" in bound:
        return None  # DEFAULT, or a partition of someone else's making
    numbers = [int(n) for n in _NUMBER.findall(bound)]
    if len(numbers) != 2:
        return None
    first, last = numbers[0], numbers[1] - 1
    runs = last - first + 1
    folded = _FOLD_COMMENT.match(comment or "")
    if folded:
        runs = int(folded.group(1))
    elif _STAGE_COMMENT.match(comment or ""):
        runs = 1
    return SinkPartition(name, first, last, runs, size, False, parent)


def attach_run(conn: Connection, table: str, stage: str, run_id: int) -> bool:
    """Inside the commit: make the stage the run's partition. False when a fold's range already
    covers the run id: the caller then copies the rows in (the module docstring says when).

    Locks are taken in the order a fold takes them, so the two never deadlock: the partition
    that covers the run first (a fold copying it holds it until its commit), else the target,
    then `<table>_runs`, SHARE UPDATE EXCLUSIVE (what attaching takes anyway; readers go on).
    """
    parent = runs_parent(conn, table)
    if parent is None:  # a LIST target upkeep has not given `<table>_runs` yet
        conn.execute(
            text(
                f"ALTER TABLE {quote(table)} ATTACH PARTITION {quote(stage)} "
                f"FOR VALUES IN ({int(run_id)})"
            )
        )
        return True
    if _lock_covering(conn, table, parent, run_id):
        return False
    for locked in dict.fromkeys([table, parent]):
        conn.execute(text(f"LOCK TABLE ONLY {quote(locked)} IN SHARE UPDATE EXCLUSIVE MODE"))
    if _covering(conn, table, parent, run_id) is not None:  # a fold committed since the look
        return False
    conn.execute(
        text(
            f"ALTER TABLE {quote(parent)} ATTACH PARTITION {quote(stage)} "
            f"FOR VALUES FROM ({int(run_id)}) TO ({int(run_id) + 1})"
        )
    )
    return True


def _covering(conn: Connection, table: str, parent: str, run_id: int) -> SinkPartition | None:
    return next(
        (
            p
            for p in partitions(conn, table, sizes=False, parent=parent)
            if not p.listed and p.first <= run_id <= p.last
        ),
        None,
    )


def _lock_covering(conn: Connection, table: str, parent: str, run_id: int, tries: int = 8) -> bool:
    """Lock the partition covering `run_id` for the rows' insert; False when none covers it.

    A fold that is copying that partition holds it until it commits and drops it; the lock
    then fails (the table is gone) and the fold's new partition, which covers the run too, is
    locked instead. Taking the target's lock first would deadlock with that fold's swap.
    """
    for _ in range(tries):
        cover = _covering(conn, table, parent, run_id)
        if cover is None:
            return False
        try:
            with conn.begin_nested():
                conn.execute(text(f"LOCK TABLE {quote(cover.name)} IN ROW EXCLUSIVE MODE"))
            return True
        except ProgrammingError as err:
            if not isinstance(err.orig, UndefinedTable):
                raise
    raise RuntimeError(f"run {run_id}'s partition of {table} kept being folded: try again")
