"""One Spark Connect session shared by the runs on a Connect server, per version of the code.

A Connect server starts a Python worker daemon per session (each session has its own artifact
id in the workers' environment) and never stops it: a fresh session per run paid a new daemon
and its imports (~1.5 s of a 1,000-record run) and left one more idle daemon (~56 MB) on the
server after every run. Runs that share a session share the daemon and its warm workers.

Workers keep the modules they imported, so the session is keyed by a fingerprint of the code
they run (drainer, spark_jobs and the packages of the drains' processors and handlers): edit a
handler and the next run gets a fresh session, hence fresh imports. The id lives in a small
file per endpoint and code version under drainer's home; a session the server has closed
(idle too long) is replaced by a new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

UNUSED_SESSION_DAYS = 7  # a session id file no run used for this long is deleted
MAX_FILES = 5_000  # a fingerprint walks at most this many files per package
SKIPPED_DIRS = {"__pycache__", "node_modules", "site-packages"}


def session_file(directory: Path, endpoint: str, code: str) -> Path:
    """Where the id of `code`'s session on `endpoint` is kept: one small file per pair, so
    drains of different code each keep theirs."""
    key = hashlib.sha256(f"{endpoint}\0{code}".encode()).hexdigest()[:16]
    return directory / f"session-{key}.json"


def shared_session_id(directory: Path, endpoint: str, code: str, closed: str | None = None) -> str:
    """The session id for `code` on `endpoint`; a new one the first time, or when `closed` is
    the stored one (the server closed it)."""
    path = session_file(directory, endpoint, code)
    try:
        stored = json.loads(path.read_text()).get("id")
    except (OSError, ValueError, AttributeError):
        stored = None
    if stored and stored != closed:
        with contextlib.suppress(OSError):
            os.utime(path)  # in use: not one to prune
        return str(stored)
    session_id = str(uuid.uuid4())
    directory.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"code": code, "id": session_id}))
    os.replace(tmp, path)  # concurrent writers: one wins, the other's run keeps its own id
    _prune(directory)
    return session_id


def _prune(directory: Path) -> None:
    """Forget the ids of code versions no run has used for a while (every edit makes one)."""
    cutoff = time.time() - UNUSED_SESSION_DAYS * 86_400
    for old in directory.glob("session-*.json"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()


def with_session_id(endpoint: str, session_id: str) -> str:
    """`sc://host:port[/;params]` with `session_id` added."""
    if "/;" in endpoint:
        return f"{endpoint};session_id={session_id}"
    return f"{endpoint.rstrip('/')}/;session_id={session_id}"


def code_fingerprint(modules: Iterable[str], extra: str = "") -> str:
    """A digest of the source files of the top-level packages of `modules` (paths, sizes and
    modification times), plus `extra` (settings the session carries)."""
    digest = hashlib.sha256(extra.encode())
    for top in sorted({m.split(":", 1)[0].split(".", 1)[0] for m in modules if m}):
        for path in _source_files(top):
            try:
                stat = path.stat()
            except OSError:
                continue
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def _source_files(top_level: str) -> list[Path]:
    """The .py files of an importable top-level module or package, found without importing it."""
    try:
        spec = importlib.util.find_spec(top_level)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if not spec.submodule_search_locations:
        return [Path(spec.origin)] if spec.origin and spec.origin.endswith(".py") else []
    files: list[Path] = []
    for root in spec.submodule_search_locations:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(
                d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith(".")
            )
            files.extend(Path(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
            if len(files) >= MAX_FILES:
                return files[:MAX_FILES]
    return files
