"""One Spark Connect session shared by the runs on a Connect server, per version of the code.

A Connect server starts a Python worker daemon per session (each session has its own artifact
id in the workers' environment) and never stops it: a fresh session per run paid a new daemon
and its imports (~1.5 s of a 1,000-record run) and left one more idle daemon (~56 MB) on the
server after every run. Runs that share a session share the daemon and its warm workers.

Workers keep the modules they imported, so the session is keyed by a fingerprint of the code
they run (drainer, spark_jobs and the packages of the drains' processors and handlers): edit a
handler and the next run gets a fresh session, hence fresh imports. The id is derived from the
endpoint, that fingerprint and a generation, so processes with different drainer homes share it;
a small file per endpoint and code version under the home keeps the generation, which moves on
when the server has closed the session (idle too long).

A remote server (SPARK_REMOTE) imports its own copies of the code, which the client cannot see:
its fingerprint is measured on the server by a one-row job in the session, and a session opened
for other server code is released and replaced (`known_server_code`).
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
SESSION_NAMESPACE = uuid.UUID("5b0c3f8e-52a4-4c57-9a0e-6b1d2f7c9e11")  # drainer's shared sessions


def session_file(directory: Path, endpoint: str, code: str) -> Path:
    """Where the id of `code`'s session on `endpoint` is kept: one small file per pair, so
    drains of different code each keep theirs."""
    key = hashlib.sha256(f"{endpoint}\0{code}".encode()).hexdigest()[:16]
    return directory / f"session-{key}.json"


def shared_session_id(directory: Path, endpoint: str, code: str, closed: str | None = None) -> str:
    """The session id for `code` on `endpoint`; the next one in its sequence when `closed` is
    the current one (the server closed it).

    Derived, not drawn: uuid5 of endpoint, code and a generation, so every process running the
    same code shares one session even when its drainer home is new (a test's, a container's),
    instead of leaving one more session and worker daemon on the server. The file only keeps
    the generation, so a closed session is not asked for again.
    """
    path = session_file(directory, endpoint, code)
    try:
        generation = int(json.loads(path.read_text()).get("generation", 0))
    except (OSError, ValueError, AttributeError, TypeError):
        generation = 0
    session_id = _derived_id(endpoint, code, generation)
    if session_id != closed and path.exists():
        with contextlib.suppress(OSError):
            os.utime(path)  # in use: not one to prune
        return session_id
    if session_id == closed:
        generation += 1
        session_id = _derived_id(endpoint, code, generation)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"code": code, "generation": generation}))
    os.replace(tmp, path)  # concurrent writers agree: the id follows from what they write
    prune(directory)
    return session_id


def _derived_id(endpoint: str, code: str, generation: int) -> str:
    return str(uuid.uuid5(SESSION_NAMESPACE, f"{endpoint}\0{code}\0{generation}"))


def known_server_code(directory: Path, endpoint: str) -> str:
    """The fingerprint of a remote server's code as last measured ('' before the first time)."""
    try:
        return str(json.loads(_server_code_file(directory, endpoint).read_text())["code"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def remember_server_code(directory: Path, endpoint: str, code: str) -> None:
    path = _server_code_file(directory, endpoint)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"endpoint": endpoint, "code": code}))
    os.replace(tmp, path)


def _server_code_file(directory: Path, endpoint: str) -> Path:
    key = hashlib.sha256(endpoint.encode()).hexdigest()[:16]
    return directory / f"server-{key}.json"


def prune(directory: Path, pattern: str = "session-*.json") -> None:
    """Forget the files of `pattern` no run has used for a while: the ids of code versions
    (every edit makes one), or the slots of kept sessions (spark_jobs.own_session)."""
    cutoff = time.time() - UNUSED_SESSION_DAYS * 86_400
    for old in directory.glob(pattern):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()


def with_session_id(endpoint: str, session_id: str) -> str:
    """`sc://host:port[/;params]` with `session_id` added."""
    return with_param(endpoint, "session_id", session_id)


def with_param(endpoint: str, key: str, value: str) -> str:
    """`sc://host:port[/;params]` with `;key=value` added."""
    if "/;" in endpoint:
        return f"{endpoint};{key}={value}"
    return f"{endpoint.rstrip('/')}/;{key}={value}"


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
