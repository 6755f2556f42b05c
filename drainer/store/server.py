"""Roles and databases of a Postgres server that drainer itself runs (`drainer services up`)."""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from sqlalchemy.engine import URL


def ping(conninfo: str) -> None:
    """One round trip through `conninfo`; raises psycopg.Error when it fails."""
    with psycopg.connect(conninfo, connect_timeout=5) as conn:
        conn.execute("select 1")


def create_role_and_database(
    url: URL, superuser: str, superuser_password: str | None = None
) -> None:
    """Create the URL's role (superuser: it is a development server) and database if missing.

    With a password in the URL the role gets it (again, if it exists), as a SCRAM verifier
    computed here, so the password itself never reaches the server or its log.
    """
    user, database = url.username or superuser, url.database or superuser
    conninfo = make_conninfo(
        host=url.host, port=url.port or 5432, user=superuser, password=superuser_password
    )
    with psycopg.connect(conninfo, dbname="postgres", connect_timeout=5, autocommit=True) as conn:
        if (
            user != superuser
            and not conn.execute("select 1 from pg_roles where rolname = %s", (user,)).fetchone()
        ):
            conn.execute(sql.SQL("create role {} login superuser").format(sql.Identifier(user)))
        if url.password:
            _set_password(conn, user, url.password)
        if not conn.execute("select 1 from pg_database where datname = %s", (database,)).fetchone():
            conn.execute(
                sql.SQL("create database {} owner {}").format(
                    sql.Identifier(database), sql.Identifier(user)
                )
            )


def require_password(conninfo: str, superuser: str, password: str) -> None:
    """Give `superuser` its password and make the server re-read pg_hba.conf, through a
    connection its old rules (trust) still let in: how a trust cluster moves to SCRAM."""
    with psycopg.connect(conninfo, dbname="postgres", connect_timeout=5, autocommit=True) as conn:
        _set_password(conn, superuser, password)
        conn.execute("select pg_reload_conf()")


def _set_password(conn: psycopg.Connection[tuple[object, ...]], role: str, password: str) -> None:
    verifier = conn.pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256")
    conn.execute(
        sql.SQL("alter role {} password {}").format(
            sql.Identifier(role), sql.Literal(verifier.decode())
        )
    )


def _maintenance_conninfo(url: URL) -> str:
    """Connection string for the URL's server, as the URL's user, to the `postgres` database."""
    found: dict[str, str | int | None] = {
        "host": url.host,
        "port": url.port or 5432,
        "dbname": "postgres",
    }
    if url.username:
        found["user"] = url.username
    if url.password:
        found["password"] = url.password
    return make_conninfo("", **found)


def _database(url: URL) -> str:
    if not url.database:
        raise ValueError(f"the database URL names no database: {url.render_as_string()}")
    return url.database


def ensure_database(url: URL) -> bool:
    """Create the URL's database if it is missing, as the URL's user; True when it was created.

    For a database drainer does not own but sets up beside its own (Dagster's storage).
    """
    database = _database(url)
    with psycopg.connect(_maintenance_conninfo(url), connect_timeout=5, autocommit=True) as conn:
        if conn.execute("select 1 from pg_database where datname = %s", (database,)).fetchone():
            return False
        try:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(database)))
        except psycopg.errors.InsufficientPrivilege as err:
            raise PermissionError(
                f"user {url.username!r} may not create database {url.database!r} on "
                f"{url.host}:{url.port or 5432}: create it yourself (CREATE DATABASE "
                f"{url.database}) or name an existing one in DRAINER_DAGSTER_DATABASE_URL"
            ) from err
        return True


def drop_database(url: URL) -> None:
    """Drop the URL's database, closing whatever sessions it still has (tests' throwaway ones)."""
    database = _database(url)
    with psycopg.connect(_maintenance_conninfo(url), connect_timeout=5, autocommit=True) as conn:
        conn.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(database))
        )
