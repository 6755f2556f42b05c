"""The drains' own modules, shipped to a Spark Connect session's Python workers as an artifact.

A user's processor or handler module lives in their own folder, on their shell's PYTHONPATH;
the Connect server's workers import from the PYTHONPATH the server was started with, which is
whoever started it. Restarting a shared server for every user's folder pulled it from under the
others' runs, so the client ships the modules instead: one zip of the top-level modules and
packages of the drains' processors and handlers, added to the session with
`addArtifacts(zip, pyfile=True)`; Spark puts a session's zips on its workers' `sys.path`.

Artifacts are per session, and a session refuses another file of a name it holds
(ARTIFACT_ALREADY_EXISTS: Spark never serves a changed module under an old name). So the zip is
named by the digest of what it holds, and the digest is part of the shared session's identity
(`spark_jobs.session`): an edited module is a new digest, hence a new session whose workers
import it fresh, never a stale copy in a warm worker.

Shipped: modules found outside this environment (an installed package is on the server's path
already, the same environment being a condition of reusing the server) and outside the
folders the server itself imports from (its PYTHONPATH). Drainer's own packages never.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import os
import sys
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from drainer.spark.connect_session import SKIPPED_DIRS, UNUSED_SESSION_DAYS

OURS = ("drainer", "spark_jobs", "dagster_project")  # installed with drainer: every server has them
MAX_FILES = 2_000  # a processor's package is small; a bigger tree is not a processor's
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so the same sources make the same bytes


@dataclass(frozen=True)
class Bundle:
    """A zip of the modules `tops`, named by `digest` (of their files' names and bytes)."""

    path: Path
    digest: str
    tops: tuple[str, ...]


def top_level(path: str) -> str:
    """`pkg.sub:fn` -> `pkg`."""
    return path.partition(":")[0].split(".", 1)[0]


def to_ship(
    callables: Iterable[str], server_path: str | None
) -> dict[str, tuple[Path, list[Path]]]:
    """The top-level modules of `callables` to ship, and the user's own modules they import
    (a processor's `import helpers` beside it), each with its folder on this process's path
    (`<root>/mod.py` or `<root>/pkg/`): not drainer's, not installed in this environment, not
    under a folder of `server_path` (the local server's PYTHONPATH; None: unknown)."""
    server_roots = {_real(p) for p in (server_path or "").split(os.pathsep) if p}
    environment = {_real(p) for p in (sys.prefix, sys.base_prefix)}
    found: dict[str, tuple[Path, list[Path]]] = {}
    seen: set[str] = set()
    pending = sorted({top_level(c) for c in callables if c})
    while pending:
        top = pending.pop()
        if top in seen or top in OURS or top in sys.stdlib_module_names:
            continue
        seen.add(top)
        root, files = _sources(top)
        if root is None or not files:
            continue  # not importable here: the run's own check names the fix
        if any(_under(root, env) for env in environment) or _real(str(root)) in server_roots:
            continue
        found[top] = (root, files)
        pending += sorted(_imported(files) - seen)
    return dict(sorted(found.items()))


def _imported(files: list[Path]) -> set[str]:
    """The top-level modules `files` import by absolute name (relative imports stay inside a
    package, shipped whole); a file that does not parse imports nothing here (its run says)."""
    names: set[str] = set()
    for path in files:
        try:
            tree = ast.parse(path.read_bytes(), str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".", 1)[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".", 1)[0])
    return names


def bundle(directory: Path, modules: dict[str, tuple[Path, list[Path]]]) -> Bundle | None:
    """Write the zip of `modules` (from `to_ship`) into `directory`, once per content; None
    when there is nothing to ship."""
    if not modules:
        return None
    entries: list[tuple[str, bytes]] = []
    for _top, (root, files) in sorted(modules.items()):
        for path in files:
            try:
                entries.append((path.relative_to(root).as_posix(), path.read_bytes()))
            except OSError:
                continue  # removed since: the digest follows what is shipped
    digest = hashlib.sha256()
    for name, data in entries:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    hex_digest = digest.hexdigest()[:32]
    target = directory / f"drain-modules-{hex_digest}.zip"
    if not target.exists():
        directory.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
            # folders as entries too: zipimport finds a package without __init__.py by them
            for folder in sorted({p for name, _ in entries for p in _parents(name)}):
                archive.writestr(zipfile.ZipInfo(f"{folder}/", ZIP_TIME), b"")
            for name, data in entries:
                info = zipfile.ZipInfo(name, ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
        os.replace(tmp, target)
        _prune(directory)
    else:
        with contextlib.suppress(OSError):
            os.utime(target)  # in use: not one to prune
    return Bundle(target, hex_digest, tuple(sorted(modules)))


def _prune(directory: Path) -> None:
    """Delete the zips of module versions no session has used for a while (an edit makes one;
    a session that still holds one has its own copy on the server)."""
    cutoff = time.time() - UNUSED_SESSION_DAYS * 86_400
    for old in directory.glob("drain-modules-*.zip"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()


def _sources(top: str) -> tuple[Path | None, list[Path]]:
    """The folder on sys.path that holds top-level module or package `top`, and its .py
    files, found without importing it (None, []: not a module of source files here)."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None, []
    if spec is None:
        return None, []
    if not spec.submodule_search_locations:
        origin = Path(spec.origin or "")
        if origin.suffix != ".py" or not origin.is_file():
            return None, []
        return origin.parent, [origin]
    # one folder reached twice (PYTHONPATH and the working directory both the checkout) is
    # one location, not a namespace package spread over folders
    locations = list(dict.fromkeys(_real(p) for p in spec.submodule_search_locations))
    if len(locations) != 1:
        return None, []  # a namespace package spread over folders: left to the server's path
    files: list[Path] = []
    for location in locations:
        for dirpath, dirnames, filenames in os.walk(location):
            dirnames[:] = sorted(
                d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith(".")
            )
            files.extend(Path(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
            if len(files) > MAX_FILES:
                return None, []  # not a processor's package: left to the server's path
    return Path(locations[0]).parent, files


def _parents(name: str) -> list[str]:
    """`a/b/c.py` -> [`a`, `a/b`]."""
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _real(path: str) -> str:
    return os.path.realpath(path)


def _under(path: Path, root: str) -> bool:
    real = _real(str(path))
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)
