"""Engine and schema migrations.

Migrations are the numbered files in the repository's top-level `sql/`. A built wheel carries a
copy as `drainer/sql/` (setup.py's build step), read with `importlib.resources`, so an installed
(non-editable) drainer finds them too; a checkout or an editable install reads `sql/` itself.
Each is applied in its own transaction and recorded in `schema_migrations`, under an advisory
lock so two processes starting together do not race.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from drainer.errors import DatabaseUnavailable

_MIGRATION = re.compile(r"^(\d{3})_[\w-]+\.sql$")
_MIGRATION_LOCK = 0x64726169  # 'drai': any constant shared by every drainer process
_made: list[Engine] = []  # what `get_engine` made, for `dispose_engines`


def migrations_dir() -> Traversable:
    """The copy shipped inside an installed wheel if there is one, else the checkout's `sql/`."""
    shipped = resources.files("drainer") / "sql"
    if shipped.is_dir():
        return shipped
    checkout = Path(__file__).resolve().parents[2] / "sql"
    if checkout.is_dir():
        return checkout
    raise RuntimeError(
        f"no schema migrations: neither {shipped} (a wheel's copy) nor {checkout} (a checkout's"
        " sql/) exists. Reinstall drainer from a wheel built by its setup.py (`pip install .`)."
    )


@functools.cache
def get_engine(url: str) -> Engine:
    """One pooled engine per URL (the run's `Settings.database_url`) per process, with the
    schema brought up to date."""
    engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
    _made.append(engine)
    migrate(engine)
    return engine


def dispose_engines() -> None:
    """Close the pooled connections of every engine this process made (each stays usable)."""
    for engine in _made:
        engine.dispose()


def migrations(sql_dir: Traversable | None = None) -> list[tuple[int, Traversable]]:
    sql_dir = sql_dir or migrations_dir()
    found = []
    for path in sorted(sql_dir.iterdir(), key=lambda p: p.name):
        if not path.name.endswith(".sql"):
            continue
        match = _MIGRATION.match(path.name)
        if not match:
            raise RuntimeError(f"{path}: migration files are named NNN_description.sql")
        found.append((int(match.group(1)), path))
    versions = [version for version, _ in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"{sql_dir}: two migrations share a version number")
    if not found:
        raise RuntimeError(f"no migrations found in {sql_dir}: the drainer package is incomplete")
    return found


def migrate(engine: Engine) -> list[int]:
    """Apply pending migrations; returns the versions applied now."""
    applied_now: list[int] = []
    try:
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
            conn.execute(
                text(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version integer PRIMARY KEY, name text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                )
            )
            done = set(conn.scalars(text("SELECT version FROM schema_migrations")))
            for version, path in migrations():
                if version in done:
                    continue
                conn.exec_driver_sql(path.read_text())
                conn.execute(
                    text("INSERT INTO schema_migrations (version, name) VALUES (:v, :n)"),
                    {"v": version, "n": path.name},
                )
                applied_now.append(version)
    except OperationalError as err:
        raise DatabaseUnavailable(
            f"cannot reach Postgres at {engine.url.render_as_string(hide_password=True)}: "
            f"{err.orig}. Start it with `drainer services up` or set DRAINER_DATABASE_URL."
        ) from None
    return applied_now
