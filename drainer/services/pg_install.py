"""Finding the PostgreSQL server programs, installing them with apt when we may.

Debian keeps server binaries off PATH (in /usr/lib/postgresql/<major>/bin), so PATH alone is not
enough; `pg_config` from libpq-dev can point to a client-only directory, so we check for initdb.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from drainer.errors import ServiceError

INSTALL_HINT = "apt-get install postgresql (or your platform's PostgreSQL server package)"


def bindir(echo: Callable[[str], None] = print) -> Path:
    """The directory holding initdb and pg_ctl; installs PostgreSQL via apt-get when root."""
    found = _find()
    if found is not None:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ServiceError(f"PostgreSQL server programs (initdb, pg_ctl) not found; {INSTALL_HINT}")
    echo("postgres  PostgreSQL is not installed; installing it with apt-get (takes a minute)")
    _apt_install("postgresql")
    found = _find()
    if found is None:
        raise ServiceError(
            f"apt-get installed postgresql but initdb is still missing; {INSTALL_HINT}"
        )
    return found


def _find() -> Path | None:
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if done.returncode == 0:
            candidates.append(Path(done.stdout.strip()))
    candidates += sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=_major, reverse=True
    )  # newest major first
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).parent)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    return None


def _major(bin_path: Path) -> int:
    match = re.fullmatch(r"\d+", bin_path.parent.name)
    return int(match.group()) if match else -1


def _apt_install(package: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        done = subprocess.run(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if done.returncode != 0:
            tail = "\n".join(done.stdout.strip().splitlines()[-20:])
            raise ServiceError(f"`{' '.join(cmd)}` failed; {INSTALL_HINT}\n{tail}")
