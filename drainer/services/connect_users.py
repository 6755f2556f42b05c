"""Runs using the local Connect server, so that a restart never pulls it from under one.

A run holds a shared flock on its server's `in-use.lock` while its Spark job runs, and names
itself in a file beside it; `drainer services up` takes the lock exclusively before it restarts
the server: it waits for the runs to end, or refuses naming them. While it holds the lock, a run
that starts waits for the restarted server instead of failing on the stopped one.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from drainer.errors import ServiceError

LOCK = "in-use.lock"
USERS = "users"


@contextmanager
def using(root: Path, label: str) -> Iterator[None]:
    """Hold the server at `root` in use as `label` ("run 4 of drain orders") for the block."""
    users = root / USERS
    users.mkdir(parents=True, exist_ok=True)
    me = users / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with (root / LOCK).open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_SH)  # waits while a restart holds it
        me.write_text(f"{label} (pid {os.getpid()})")
        try:
            yield
        finally:
            me.unlink(missing_ok=True)
            fcntl.flock(fh, fcntl.LOCK_UN)


def current_users(root: Path) -> list[str]:
    """Who holds the server now: the labels of live processes (a killed run's file is stale)."""
    found = []
    for entry in sorted((root / USERS).glob("*-*")):
        pid = int(entry.name.split("-", 1)[0])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            entry.unlink(missing_ok=True)
            continue
        except PermissionError:
            pass  # alive, another user's
        try:
            found.append(entry.read_text().strip())
        except FileNotFoundError:  # it ended just now
            continue
    return found


@contextmanager
def exclusive(root: Path, wait_s: float) -> Iterator[bool]:
    """Hold the server's lock alone for the block, waiting up to `wait_s` for the runs using
    it; yields whether it got the lock (False: runs still hold it)."""
    root.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    with (root / LOCK).open("a") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.5)
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def hold_for_restart(
    root: Path, address: str, reason: str, wait_s: float, restart: bool, held: ExitStack | None
) -> None:
    """Before the server at `root` restarts for `reason`: wait `wait_s` for the runs using it
    and keep it (in `held`, else only check), or raise ServiceError naming them; `restart`
    goes ahead anyway (they fail, and their next runs resume their plans)."""
    if held is not None:
        if held.enter_context(exclusive(root, wait_s)) or restart:
            return
    else:
        with exclusive(root, wait_s) as free:
            if free or restart:
                return
    users = "; ".join(current_users(root)) or "a run"
    raise ServiceError(
        f"the Spark Connect server at {address} must restart ({reason}), but {users} is using "
        "it: `drainer services up --wait SECONDS` restarts it once the run is done, "
        "`--restart` now (the run fails; its next `drainer run` resumes the plan)"
    )
