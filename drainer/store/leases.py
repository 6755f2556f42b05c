"""The drain row, its advisory lock and the fencing token.

One run of a drain at a time: a session advisory lock that dies with its connection (a crashed
run never blocks the next one), plus a token bumped on every lease, which every write checks so
that a run that lost its lock (a zombie) can neither stage nor commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from drainer.errors import DrainBusy, FencedOut, ServiceUnavailable

log = logging.getLogger(__name__)

# pyformat parameters: the same text runs on a SQLAlchemy connection (driver SQL) and on a
# plain psycopg connection inside a Spark task, so there is one fence check, not two
_FENCE_SQL = "SELECT fence FROM drains WHERE name = %(drain)s FOR {lock}"
# a crashed run's lock goes with its connection, but only once its Postgres backend has seen the
# client vanish and exited: a run started right after a crash (a retry, a resume) found the
# drain held by the dead run. A refused run tries this long before calling the drain busy.
DEAD_HOLDER_GRACE_S = 5.0


@dataclass(frozen=True)
class Lease:
    drain: str
    fence: int


@dataclass(frozen=True)
class DrainRow:
    """What the `drains` table keeps of a drain's configuration."""

    name: str
    topic: str
    group: str
    levels: int


@contextmanager
def drain_lease(engine: Engine, drain: DrainRow, wait_s: float = 0.0) -> Iterator[Lease]:
    """Hold the drain for one run: a session advisory lock plus a fresh fencing token."""
    conn = engine.connect()
    try:
        ensure_drain(engine, drain)
        deadline = time.monotonic() + max(wait_s, DEAD_HOLDER_GRACE_S)
        refused = 0
        while not conn.scalar(
            text("SELECT pg_try_advisory_lock(hashtextextended('drainer:' || :n, 0))"),
            {"n": drain.name},
        ):
            conn.rollback()
            if time.monotonic() >= deadline:
                raise DrainBusy(_busy_message(engine, drain.name, wait_s))
            if not refused:  # once: a run that waits says so (the Dagster step's log shows it)
                log.info(
                    "drain %s is held by another run: waiting up to %.0f s",
                    drain.name,
                    max(wait_s, DEAD_HOLDER_GRACE_S),
                )
            refused += 1
            time.sleep(0.5)
        conn.commit()
        with engine.begin() as tx:
            fence = tx.scalar(
                text("UPDATE drains SET fence = fence + 1 WHERE name = :n RETURNING fence"),
                {"n": drain.name},
            )
        lost_level = logging.WARNING
        try:
            yield Lease(drain.name, fence)
        except ServiceUnavailable:
            # the run's one message already names the lost service; the lock's fate is detail
            lost_level = logging.DEBUG
            raise
        finally:
            _release(conn, drain.name, lost_level)
    finally:
        conn.close()


def _release(conn: Connection, name: str, lost_level: int = logging.WARNING) -> None:
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
        log.log(
            lost_level,
            "drain '%s': the lock's connection was lost before the run ended (%s); "
            "the server released the lock with it",
            name,
            err.orig,
        )


def _busy_message(engine: Engine, name: str, wait_s: float) -> str:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                # a run just planned has not started yet: its plan time stands in
                "SELECT r.id, r.status, coalesce(r.started_at, r.planned_at) AS since "
                "FROM drains d JOIN runs r "
                "ON r.id = d.owner_run_id WHERE d.name = :n"
            ),
            {"n": name},
        ).first()
    holder = f" (run {row.id}, {row.status} since {row.since:%H:%M:%S})" if row else ""
    waited = f" after waiting {wait_s:.0f} s" if wait_s else ""
    return (
        f"drain '{name}' is already being run by another process{holder}{waited}. "
        "Only one run of a drain runs at a time: wait for it to finish, or pass --wait SECONDS."
    )


def ensure_drain(engine: Engine, drain: DrainRow) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO drains (name, topic, group_name, levels) VALUES (:n, :t, :g, :l) "
                "ON CONFLICT (name) DO UPDATE SET topic = :t, group_name = :g, levels = :l"
            ),
            {"n": drain.name, "t": drain.topic, "g": drain.group, "l": drain.levels},
        )


def set_owner(conn: Connection, drain: str, run_id: int) -> None:
    """Which run holds the drain now, for the busy message of a second run."""
    conn.execute(
        text("UPDATE drains SET owner_run_id = :r WHERE name = :d"), {"r": run_id, "d": drain}
    )


def check_fence(conn: Any, lease: Lease | None, shared: bool = False) -> None:
    """Lock the drain row and prove the lease is still the newest; call first in a write.

    `conn` is a SQLAlchemy connection (the driver) or a psycopg connection (a Spark task).
    `shared` takes a share lock, for writes that run side by side (staging tasks): a new lease
    bumps the fence under a row lock, so it waits for them, and they fail after it. `None`
    (no lease: tests and tools that stage outside a run) checks nothing.
    """
    if lease is None:
        return
    sql = _FENCE_SQL.format(lock="SHARE" if shared else "UPDATE")
    params = {"drain": lease.drain}
    if isinstance(conn, Connection):
        current = conn.exec_driver_sql(sql, params).scalar()
    else:
        row = conn.execute(sql, params).fetchone()
        current = None if row is None else row[0]
    if current != lease.fence:
        raise FencedOut(
            f"run of drain '{lease.drain}' holds fence {lease.fence} but the drain is at "
            f"{current}: a newer run took over, so this run's results are discarded"
        )
