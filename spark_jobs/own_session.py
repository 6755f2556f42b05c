"""A session whose settings are its own, for work that must change them (`own_settings`).

Runs and other drains' maintenance share a session: a setting changed there and set back raced
them (a second maintain read the first's value as the one to restore, or found the check on
again under its VACUUM). A Delta MERGE needs the run's transaction (`txnAppId`,
`txnVersion`) and marker as settings; Iceberg's needs the run's `spark.wap.id`.

A Connect server compiles each session's generated code on its own: the cache of compiled
classes is keyed by the session's class loader. A clone made for one MERGE compiled its ~58
classes again every run, and the JIT then worked on them afresh, where a long-lived session
compiles 2 (benchmarks/README.md, "merge_session"). So the work named by `keep_for` (every
drain's Delta merges: "merge") gets a session kept on the server from one run to the next:

- a slot of a small pool, leased under a file lock (processes and threads never share one);
- its id derived from the run session's, the work and the slot (`shared_session_id`: a
  session the server closed, idle too long, is followed by the next generation);
- given exactly the run session's settings when leased: what an earlier lease set (the last
  run's transaction) is unset;
- never holding what only a released session frees (a `localCheckpoint`: Iceberg's MERGE
  keeps its clone);
- never changed under a running operation: a slot whose last lease did not end cleanly (it
  raised, or its process was killed in its MERGE, whose commit reads the transaction
  settings when it commits) leaves that session to it and moves on to a new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from pyspark.sql import SparkSession

from drainer.spark.connect_session import (
    prune,
    shared_session_id,
    with_session_id,
)
from spark_jobs.session import MAX_CLOSED, SESSION_CLOSED, MadeAt, drop_client, is_connect, made_at

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

SLOTS = 16  # kept sessions per run session and work: the most concurrent leases of one work
CLEAN, BUSY = b"clean", b"busy"  # how a slot's last lease ended, in its lock file


@contextlib.contextmanager
def own_settings(spark: SparkSession, keep_for: str | None = None) -> Iterator[SparkSession]:
    """A session of `spark`'s settings whose changes stay in it. `keep_for` (a Connect
    session drainer opened): the work it is for, whose session is kept for its next lease;
    else a clone of `spark`, released afterwards."""
    if not is_connect(spark):
        yield spark.newSession()  # the same SparkContext, SQL settings of its own
        return
    where = made_at(spark)
    if keep_for is not None and where is not None:
        run_session = cast("ConnectSession", spark).session_id
        with _slot(where, f"own {run_session} {keep_for}") as slot:
            if slot is not None:
                own = _kept(spark, where, slot)
                try:
                    yield own
                    slot.done()
                finally:
                    drop_client(own)  # the server keeps the session, and its compiled code
                return
    clone = cast("ConnectSession", spark).cloneSession()
    clone.release_session_on_close = True  # a clone skips the __init__ that sets it
    own = cast(SparkSession, clone)
    try:
        yield own
    finally:
        with contextlib.suppress(Exception):
            own.stop()  # released on the server: it ran no Python, so it leaves no daemon
        drop_client(own)  # kept referenced, never closed again by the collector (session._dropped)


@dataclass
class _Slot:
    """A leased slot: its key and lock file, and whether its last lease ended cleanly."""

    key: str
    fd: int
    clean: bool

    def done(self) -> None:
        """The lease's work returned: its session runs nothing, the next lease may use it."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, CLEAN, 0)


@contextlib.contextmanager
def _slot(where: MadeAt, work: str) -> Iterator[_Slot | None]:
    """The first of the work's slots no one holds, locked while the caller uses it; None
    when all are held. The lock file says how the slot's last lease ended: a lease that
    raised, or whose process died, leaves it unclean."""
    digest = hashlib.sha256(work.encode()).hexdigest()[:16]
    where.directory.mkdir(parents=True, exist_ok=True)
    prune(where.directory, "own-*.lock")  # every new run session makes its own
    for n in range(SLOTS):
        fd = os.open(where.directory / f"own-{digest}-{n}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            last = os.pread(fd, len(CLEAN), 0)
            os.ftruncate(fd, 0)
            os.pwrite(fd, BUSY, 0)
            yield _Slot(f"{work} {n}", fd, clean=last in (CLEAN, b""))
        finally:
            os.close(fd)  # the lock goes with it; a killed process's goes with the process
        return
    yield None


def _kept(spark: SparkSession, where: MadeAt, slot: _Slot) -> SparkSession:
    """The slot's session, with `spark`'s settings: the one it had if its last lease ended
    cleanly, else the next one (the last may still run that lease's operation)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session_id = shared_session_id(where.directory, where.endpoint, slot.key)
    for _ in range(MAX_CLOSED):
        if not slot.clean:
            session_id = shared_session_id(where.directory, where.endpoint, slot.key, session_id)
        own = cast(SparkSession, ConnectSession(with_session_id(where.address, session_id)))
        try:
            _settings_of(spark, own)
            return own
        except Exception as err:
            drop_client(own)
            if SESSION_CLOSED not in str(err):  # closed: idle too long, the next one then
                raise
            slot.clean = False
    raise RuntimeError(f"no usable Spark Connect session for {slot.key!r} in {MAX_CLOSED} tries")


def _settings_of(spark: SparkSession, own: SparkSession) -> None:
    """Give `own` exactly the SQL settings `spark` holds (the run session's catalogs,
    partitions and time zone): what a kept session's earlier lease set goes."""
    theirs = spark.conf.getAll
    mine = own.conf.getAll
    for key in mine.keys() - theirs.keys():
        own.conf.unset(key)
    for key, value in theirs.items():
        if mine.get(key) != value:
            own.conf.set(key, value)
