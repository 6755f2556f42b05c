"""Postgres state of the drains: leases with fencing, plans, offsets, history (DESIGN §5).

Every function takes an open connection and runs inside the caller's transaction, so the
lifecycle module decides what commits together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from drainer.allocation import Plan
from drainer.config import DrainConfig

log = logging.getLogger(__name__)


class DrainBusy(RuntimeError):
    """Another run holds the drain; nothing was changed."""


class FencedOut(RuntimeError):
    """A newer run took the drain: this (zombie) run must not commit."""


class CommitConflict(RuntimeError):
    """Committed offsets moved under the run; its results were not published."""


@dataclass(frozen=True)
class Lease:
    drain: str
    fence: int


@contextmanager
def drain_lease(engine: Engine, drain: DrainConfig, wait_s: float = 0.0) -> Iterator[Lease]:
    """Hold the drain for one run: a session advisory lock plus a fresh fencing token.

    The lock dies with the holder's connection, so a crashed run never blocks the next one;
    the token makes a run that lost its connection (a zombie) unable to commit.
    """
    conn = engine.connect()
    try:
        ensure_drain(engine, drain)
        deadline = time.monotonic() + wait_s
        while not conn.scalar(
            text("SELECT pg_try_advisory_lock(hashtextextended('drainer:' || :n, 0))"),
            {"n": drain.name},
        ):
            conn.rollback()
            if time.monotonic() >= deadline:
                raise DrainBusy(_busy_message(engine, drain.name, wait_s))
            time.sleep(0.5)
        conn.commit()
        with engine.begin() as tx:
            fence = tx.scalar(
                text("UPDATE drains SET fence = fence + 1 WHERE name = :n RETURNING fence"),
                {"n": drain.name},
            )
        try:
            yield Lease(drain.name, fence)
        finally:
            _release(conn, drain.name)
    finally:
        conn.close()


def _release(conn: Connection, name: str) -> None:
    """Unlock; if the lock's connection is already gone, so is the lock (the server dropped it).

    Raising here would hide the run's own outcome (e.g. FencedOut of a run that lost its lock).
    """
    try:
        conn.execute(
            text("SELECT pg_advisory_unlock(hashtextextended('drainer:' || :n, 0))"), {"n": name}
        )
        conn.commit()
    except DBAPIError as err:
        if not err.connection_invalidated:
            raise
        log.warning(
            "drain '%s': the lock's connection was lost before the run ended (%s); "
            "the server released the lock with it",
            name,
            err.orig,
        )


def _busy_message(engine: Engine, name: str, wait_s: float) -> str:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT r.id, r.status, r.started_at FROM drains d JOIN runs r "
                "ON r.id = d.owner_run_id WHERE d.name = :n"
            ),
            {"n": name},
        ).first()
    holder = f" (run {row.id}, {row.status} since {row.started_at:%H:%M:%S})" if row else ""
    waited = f" after waiting {wait_s:.0f} s" if wait_s else ""
    return (
        f"drain '{name}' is already being run by another process{holder}{waited}. "
        "Only one run of a drain runs at a time: wait for it to finish, or pass --wait SECONDS."
    )


def ensure_drain(engine: Engine, drain: DrainConfig) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO drains (name, topic, group_name, levels) VALUES (:n, :t, :g, :l) "
                "ON CONFLICT (name) DO UPDATE SET topic = :t, group_name = :g, levels = :l"
            ),
            {"n": drain.name, "t": drain.topic, "g": drain.group, "l": drain.levels},
        )


def check_fence(conn: Connection, lease: Lease, shared: bool = False) -> None:
    """Lock the drain row and prove the lease is still the newest; call first in a commit.

    `shared` takes a share lock instead, for writes that may run side by side (staging): a new
    lease bumps the fence under a row lock, so it waits for them, and they fail after it.
    """
    lock = "FOR SHARE" if shared else "FOR UPDATE"
    current = conn.scalar(
        text(f"SELECT fence FROM drains WHERE name = :n {lock}"), {"n": lease.drain}
    )
    if current != lease.fence:
        raise FencedOut(
            f"run of drain '{lease.drain}' holds fence {lease.fence} but the drain is at "
            f"{current}: a newer run took over, so this run's results are discarded"
        )


@dataclass(frozen=True)
class StoredRange:
    topic: str
    level: int
    partition: int
    start: int
    end: int
    start_map: str
    records: int


@dataclass(frozen=True)
class StoredRun:
    id: int
    drain: str
    status: str
    levels: list[int]
    budget: int
    mode: str
    attempts: int
    ranges: list[StoredRange]


def partition_offsets(conn: Connection, drain: str) -> dict[tuple[str, int], tuple[int, str]]:
    rows = conn.execute(
        text(
            "SELECT topic, partition, committed, offset_map FROM partition_offsets WHERE drain = :d"
        ),
        {"d": drain},
    )
    return {(r.topic, r.partition): (r.committed, r.offset_map) for r in rows}


def level_history(
    conn: Connection, drain: str, levels: list[int], window: int
) -> dict[int, list[int]]:
    """Drained counts of each level in the last `window` committed runs that covered it.

    A run that did not cover a level (a backfill of other levels) is not part of that level's
    window: it says nothing about how much the level could use.
    """
    rows = conn.execute(
        text(
            "SELECT level, drained FROM ("
            "  SELECT rl.level, rl.drained, r.id,"
            "         row_number() OVER (PARTITION BY rl.level ORDER BY r.id DESC) AS n"
            "  FROM run_levels rl JOIN runs r ON r.id = rl.run_id"
            "  WHERE r.drain = :d AND r.status = 'committed' AND rl.level = ANY(:levels)"
            ") h WHERE n <= :w ORDER BY level, id"
        ),
        {"d": drain, "levels": levels, "w": window},
    )
    history: dict[int, list[int]] = {level: [] for level in levels}
    for row in rows:
        history[row.level].append(row.drained or 0)
    return history


def open_run(conn: Connection, drain: str) -> StoredRun | None:
    """The drain's uncommitted plan, if any: it must be resumed before anything new is planned."""
    row = conn.execute(
        text(
            "SELECT id, drain, status, levels, budget, mode, attempts FROM runs "
            "WHERE drain = :d AND status <> 'committed'"
        ),
        {"d": drain},
    ).first()
    return None if row is None else _load_run(conn, row)


def get_run(conn: Connection, run_id: int) -> StoredRun:
    row = conn.execute(
        text("SELECT id, drain, status, levels, budget, mode, attempts FROM runs WHERE id = :r"),
        {"r": run_id},
    ).one()
    return _load_run(conn, row)


def _load_run(conn: Connection, row) -> StoredRun:
    ranges = [
        StoredRange(
            r.topic, r.level, r.partition, r.start_offset, r.end_offset, r.start_map, r.records
        )
        for r in conn.execute(
            text(
                "SELECT topic, level, partition, start_offset, end_offset, start_map, records "
                "FROM run_ranges WHERE run_id = :r ORDER BY level DESC, partition"
            ),
            {"r": row.id},
        )
    ]
    return StoredRun(
        row.id, row.drain, row.status, list(row.levels), row.budget, row.mode, row.attempts, ranges
    )


def write_plan(
    conn: Connection,
    lease: Lease,
    drain: DrainConfig,
    plan: Plan,
    levels: list[int],
    trigger: str,
    start_maps: dict[tuple[str, int], str],
    initial_offsets: dict[tuple[str, int], int],
) -> int:
    """Store the plan before anything is read, so a crash after this point resumes it."""
    check_fence(conn, lease)
    for (topic, partition), committed in initial_offsets.items():
        conn.execute(
            text(
                "INSERT INTO partition_offsets (drain, topic, level, partition, committed) "
                "VALUES (:d, :t, :l, :p, :c) ON CONFLICT DO NOTHING"
            ),
            {
                "d": drain.name,
                "t": topic,
                "l": int(topic.rsplit("-", 1)[1]),
                "p": partition,
                "c": committed,
            },
        )
    run_id = conn.scalar(
        text(
            "INSERT INTO runs (drain, status, levels, budget, mode, trigger, fence) "
            "VALUES (:d, 'planned', :levels, :b, :m, :t, :f) RETURNING id"
        ),
        {
            "d": drain.name,
            "levels": levels,
            "b": drain.budget,
            "m": drain.mode,
            "t": trigger,
            "f": lease.fence,
        },
    )
    conn.execute(
        text(
            "INSERT INTO run_levels (run_id, level, reserved, burst, allocated, backlog_before, planned) "
            "VALUES (:r, :level, :reserved, :burst, :allocated, :backlog, :planned)"
        ),
        [
            {
                "r": run_id,
                "level": lp.level,
                "reserved": lp.reserved,
                "burst": lp.burst,
                "allocated": lp.allocated,
                "backlog": lp.backlog,
                "planned": lp.planned,
            }
            for lp in plan.levels.values()
        ],
    )
    if plan.ranges:
        conn.execute(
            text(
                "INSERT INTO run_ranges (run_id, topic, level, partition, start_offset, end_offset, "
                "start_map, records) VALUES (:r, :t, :l, :p, :s, :e, :m, :n)"
            ),
            [
                {
                    "r": run_id,
                    "t": drain.level_topic(pr.level),
                    "l": pr.level,
                    "p": pr.partition,
                    "s": pr.start,
                    "e": pr.end,
                    "n": pr.records,
                    "m": start_maps.get((drain.level_topic(pr.level), pr.partition), ""),
                }
                for pr in plan.ranges
            ],
        )
    conn.execute(
        text("UPDATE drains SET owner_run_id = :r WHERE name = :d"), {"r": run_id, "d": drain.name}
    )
    return run_id


def mark_running(conn: Connection, lease: Lease, run_id: int, dagster_run_id: str | None) -> int:
    check_fence(conn, lease)
    attempts = conn.scalar(
        text(
            "UPDATE runs SET status = 'running', attempts = attempts + 1, started_at = now(), "
            "fence = :f, error = NULL, dagster_run_id = coalesce(:dr, dagster_run_id) "
            "WHERE id = :r RETURNING attempts"
        ),
        {"f": lease.fence, "r": run_id, "dr": dagster_run_id},
    )
    conn.execute(
        text("UPDATE drains SET owner_run_id = :r WHERE name = :d"), {"r": run_id, "d": lease.drain}
    )
    return attempts


def mark_failed(engine: Engine, lease: Lease, run_id: int, error: str) -> None:
    """Best effort: the plan stays and is resumed by the next run either way.

    Only while the run still carries this lease's fence: a zombie that was fenced out must not
    mark failed the plan that a newer run has resumed and is executing (its commit would refuse).
    """
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE runs SET status = 'failed', error = :e "
                "WHERE id = :r AND status <> 'committed' AND fence = :f"
            ),
            {"r": run_id, "e": error[:8000], "f": lease.fence},
        )
