"""Where the local PostgreSQL cluster lives and as whom its programs run.

PostgreSQL refuses to run as root. As root we therefore run initdb/pg_ctl as the `postgres` OS
user (`runuser`), creating that user if needed. Its data must then sit where that user can reach
it: `home/postgres` when it can traverse `home`, otherwise (the usual case, `home` under /root,
mode 700) `/var/lib/drainer/postgres-<hash of home>`, with `home/postgres` a symlink to it. We do not
loosen /root's permissions, and we avoid /var/tmp because tmpfiles ages out old files there.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from drainer.errors import ServiceError
from drainer.spark.tools import require

OS_USER = "postgres"
ROOT_BASE = Path("/var/lib/drainer")
MAX_SOCKET_DIR = 80  # unix socket paths are limited to ~107 bytes including the file name


@dataclass(frozen=True)
class PgLayout:
    """The cluster's directories and the command prefix that runs its programs."""

    base: Path
    run_as: str | None  # OS user to switch to (as root), else None

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log(self) -> Path:
        return self.base / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        return self.base if len(str(self.base)) <= MAX_SOCKET_DIR else Path("/tmp")

    @property
    def initialized(self) -> bool:
        return (self.data / "PG_VERSION").is_file()

    def command(self, argv: list[str]) -> list[str]:
        """`argv` as the cluster's owner: as is, or wrapped in `runuser -u postgres --`."""
        if self.run_as is None:
            return argv
        return [require("runuser", "apt-get install util-linux"), "-u", self.run_as, "--", *argv]

    def own(self, path: Path) -> None:
        """Hand a file or directory we created to the cluster's owner."""
        if self.run_as is not None:
            shutil.chown(path, self.run_as, self.run_as)


def layout(home: Path, create: bool = True) -> PgLayout:
    """Decide the cluster's base directory for this `home`; with `create`, also make it (and
    the OS user) exist. `create=False` is for status and stop, which must not change anything."""
    link = home / "postgres"
    if os.geteuid() != 0:
        if create:
            link.mkdir(parents=True, exist_ok=True)
        return PgLayout(link, None)
    if not create:
        if link.is_dir() and (link / "data").exists():
            return PgLayout(link.resolve(), OS_USER)
        return PgLayout(_root_base(home), OS_USER)
    _ensure_os_user()
    home.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or not _reachable_by_os_user(home):
        base = _root_base(home)
        base.mkdir(parents=True, exist_ok=True)
        if not link.exists() and not link.is_symlink():
            link.symlink_to(base, target_is_directory=True)
    else:
        base = link
        base.mkdir(exist_ok=True)
    shutil.chown(base, OS_USER, OS_USER)
    base.chmod(0o700)
    return PgLayout(base, OS_USER)


def _root_base(home: Path) -> Path:
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:8]
    return ROOT_BASE / f"postgres-{digest}"


def _ensure_os_user() -> None:
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        done = subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                OS_USER,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise ServiceError(f"could not create the `{OS_USER}` OS user: {done.stderr}") from None


def _reachable_by_os_user(path: Path) -> bool:
    """Whether the OS user can traverse every directory down to `path` (ACLs included)."""
    runuser = require("runuser", "apt-get install util-linux")
    done = subprocess.run(
        [runuser, "-u", OS_USER, "--", "test", "-x", str(path)], cwd="/", capture_output=True
    )
    return done.returncode == 0
