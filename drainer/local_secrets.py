"""The generated secrets of a drainer home: the local stack's Postgres password and Spark
Connect token, and the key of the digest in Spark's Kafka group ids.

`drainer services up` makes the first two once (a run makes the key when it first reads Kafka
through Spark), each a file of its own under `<home>/secrets/` (directory 0700, file 0600), and
every process of that home reads it from there: so the secret is never on a command line, in
the drains file or in an environment variable another user could list.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
import threading
from pathlib import Path
from urllib.parse import quote

POSTGRES_PASSWORD = "postgres.password"
CONNECT_TOKEN = "spark-connect.token"
# keys the digest of the consumer settings in Spark's group ids (spark_jobs.kafka_source)
KAFKA_GROUP_KEY = "kafka-group-digest.key"

# every secret this process has read from a secret file, as written and percent-encoded (as the
# database URL holds it): `redact` blanks them out without reading the files again per line
_read: set[str] = set()
_read_lock = threading.Lock()


def secret_path(home: Path, name: str) -> Path:
    return home / "secrets" / name


def read_secret(home: Path, name: str) -> str | None:
    """The secret, or None before `drainer services up` has made it."""
    try:
        found = secret_path(home, name).read_text().strip() or None
    except FileNotFoundError:
        return None
    if found is not None:
        with _read_lock:
            _read.update((found, quote(found, safe="")))
    return found


def secrets_read() -> frozenset[str]:
    """Every secret `read_secret` has returned in this process (a copy: safe to iterate)."""
    with _read_lock:
        return frozenset(_read)


def ensure_secret(home: Path, name: str) -> str:
    """The secret, made now if missing: created under a temporary name and linked into place,
    so two processes starting at once end up with the same one."""
    path = secret_path(home, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    if not path.exists():
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{name}.")  # mode 0600
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)  # fails if another process linked its own first
        finally:
            os.unlink(temporary)
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        path.chmod(0o600)  # a copy restored by hand with the umask's mode
    found = read_secret(home, name)
    if found is None:
        raise ValueError(f"{path} is empty: delete it and run `drainer services up` again")
    return found
