"""Roles and databases of a Postgres server that drainer itself runs (`drainer services up`)."""

from __future__ import annotations

import psycopg
from psycopg import sql
from sqlalchemy.engine import URL


def ping(conninfo: str) -> None:
    """One round trip through `conninfo`; raises psycopg.Error when it fails."""
    with psycopg.connect(conninfo, connect_timeout=5) as conn:
        conn.execute("select 1")


def create_role_and_database(url: URL, superuser: str) -> None:
    """Create the URL's role (superuser: it is a development server) and database if missing."""
    user, database = url.username or superuser, url.database or superuser
    conninfo = {"host": url.host, "port": url.port or 5432, "user": superuser}
    with psycopg.connect(**conninfo, dbname="postgres", connect_timeout=5, autocommit=True) as conn:
        if (
            user != superuser
            and not conn.execute("select 1 from pg_roles where rolname = %s", (user,)).fetchone()
        ):
            stmt = sql.SQL("create role {} login superuser").format(sql.Identifier(user))
            if url.password:
                stmt += sql.SQL(" password {}").format(sql.Literal(url.password))
            conn.execute(stmt)
        if not conn.execute("select 1 from pg_database where datname = %s", (database,)).fetchone():
            conn.execute(
                sql.SQL("create database {} owner {}").format(
                    sql.Identifier(database), sql.Identifier(user)
                )
            )
