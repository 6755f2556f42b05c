"""Folding a partitioned sink target's run partitions into fewer, larger partitions.

Every committed run attaches one partition, `FOR VALUES IN (<run id>)` (drainer.store.sinks).
A fold step replaces several attached partitions by one new partition listing all their run
ids, in one transaction, so it happens once or not at all (a crash rolls it back whole):

1. the new partition is created `LIKE` the target with its indexes and a `CHECK` that is
   exactly its future partition constraint;
2. the sources are locked against writes (`SHARE`, readers go on) and their rows copied in;
3. under a short `lock_timeout`, the sources are detached (this takes `ACCESS EXCLUSIVE` on
   the target: from here to the commit, readers wait), the new partition attached — its
   `CHECK` proves the constraint, so Postgres skips the validation scan and its indexes are
   adopted, not built — and the sources dropped.

So readers wait only for catalog changes, never for the copy. Which partitions to fold is not
decided here (drainer.lifecycle.maintain); this module only lists partitions and folds a set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, text

from drainer.store.sinks import RUN_COLUMN, _fit, _q

FOLD_CHECK = "drainer_fold_runs"  # the constraint that spares the attach's validation scan
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class SinkPartition:
    """One attached partition of a target and the run ids its bound lists (ascending)."""

    name: str
    run_ids: tuple[int, ...]
    bytes: int = 0  # on disk, indexes included: what folding it copies and indexes again

    def tier(self, fanout: int) -> int:
        """0 for a run's own partition, k for one that holds about fanout**k runs."""
        tier = 0
        while fanout ** (tier + 1) <= len(self.run_ids):
            tier += 1
        return tier


def partitions(conn: Connection, table: str) -> list[SinkPartition]:
    """The target's plain LIST partitions by their first run id, with their sizes (none for a
    plain table).

    A DEFAULT partition or one partitioned further is not drainer's and is left alone.
    """
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound, "
            "coalesce(pg_total_relation_size(c.oid), 0) AS bytes "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent "
            "JOIN pg_namespace n ON n.oid = p.relnamespace "
            "WHERE p.relname = :t AND n.nspname = current_schema() AND c.relkind = 'r'"
        ),
        {"t": table},
    ).all()
    found = []
    for row in rows:
        if not row.bound.startswith("FOR VALUES IN"):
            continue
        ids = tuple(sorted(int(n) for n in _NUMBER.findall(row.bound)))
        if ids:
            found.append(SinkPartition(row.relname, ids, int(row.bytes)))
    return sorted(found, key=lambda p: p.run_ids[0])


def fold_name(table: str, run_ids: Sequence[int]) -> str:
    """`<table>_f<first run>_<last run>` (shortened with a hash past 63 bytes)."""
    return _fit(table, f"_f{min(run_ids)}_{max(run_ids)}")


def fold(
    conn: Connection,
    table: str,
    sources: Sequence[SinkPartition],
    lock_timeout_s: float,
    checkpoint: Callable[[str], None] = lambda point: None,
) -> SinkPartition:
    """Inside the caller's transaction: replace `sources` by one partition with all their rows.

    `checkpoint` is called after the copy ("fold_copied") and after the swap ("fold_swapped"),
    before the caller commits: the crash tests end the process there. Waiting longer than
    `lock_timeout_s` for the target's readers raises (psycopg LockNotAvailable); nothing is
    changed then, and the next fold tries again.
    """
    run_ids = sorted(i for p in sources for i in p.run_ids)
    folded = SinkPartition(fold_name(table, run_ids), tuple(run_ids))
    values = ", ".join(str(int(i)) for i in run_ids)
    run = _q(RUN_COLUMN)
    conn.execute(
        text(
            f"CREATE TABLE {_q(folded.name)} (LIKE {_q(table)} INCLUDING ALL, "
            f"CONSTRAINT {_q(FOLD_CHECK)} CHECK ({run} IS NOT NULL "
            f"AND {run} = ANY (ARRAY[{values}]::bigint[])))"
        )
    )
    columns = _q(*_columns(conn, table))
    for source in sources:
        conn.execute(text(f"LOCK TABLE {_q(source.name)} IN SHARE MODE"))
        conn.execute(
            text(
                f"INSERT INTO {_q(folded.name)} ({columns}) SELECT {columns} FROM {_q(source.name)}"
            )
        )
    checkpoint("fold_copied")
    conn.execute(text(f"SET LOCAL lock_timeout = '{int(lock_timeout_s * 1000)}ms'"))
    for source in sources:
        conn.execute(text(f"ALTER TABLE {_q(table)} DETACH PARTITION {_q(source.name)}"))
    conn.execute(
        text(f"ALTER TABLE {_q(table)} ATTACH PARTITION {_q(folded.name)} FOR VALUES IN ({values})")
    )
    for source in sources:
        conn.execute(text(f"DROP TABLE {_q(source.name)}"))
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
