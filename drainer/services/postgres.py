"""The local PostgreSQL server for development, or a check that the configured one answers.

`up` is idempotent: initdb once, start if stopped, create the URL's role and database if missing.
The server asks every connection for a password (SCRAM), the one `up` generated into
`<home>/secrets/postgres.password`; a cluster an older drainer made with `trust` is moved over.
Durability settings stay at PostgreSQL's defaults (fsync, synchronous_commit, full_page_writes):
the drainer's exactly-once guarantee is only as good as the commit it rests on.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo
from sqlalchemy.engine import URL, make_url

from drainer.errors import ServiceError
from drainer.local_secrets import POSTGRES_PASSWORD, ensure_secret, secret_path
from drainer.services import process
from drainer.services.pg_install import bindir
from drainer.services.pg_layout import PgLayout, layout
from drainer.services.status import ServiceStatus
from drainer.settings import Settings, psycopg_url
from drainer.spark.net import port_open
from drainer.store.server import create_role_and_database, ping, require_password

NAME = "postgres"
SUPERUSER = "postgres"
START_TIMEOUT_SECONDS = 60
# Added to postgresql.conf once; the included file is rewritten on every `up`.
INCLUDE_LINE = "include_if_exists = 'drainer.conf'\n"
AUTH = "scram-sha-256"
# a pg_hba.conf rule (local/host…) whose method is trust, as initdb --auth=trust writes them
TRUST_RULE = re.compile(r"^(\s*(?:local|host\w*)\s.*\s)trust(\s*(?:#.*)?)$", re.MULTILINE)

Echo = Callable[[str], None]


def up(settings: Settings, echo: Echo = print) -> ServiceStatus:
    """Make the database in the URL answer, running a local server unless a URL was given."""
    url = make_url(settings.database_url)
    address = _address(url)
    if not settings.local_postgres:
        _check(settings.database_url, "DRAINER_DATABASE_URL")
        return ServiceStatus(NAME, True, address, None, "external")
    password = ensure_secret(settings.home, POSTGRES_PASSWORD)
    url = url.set(password=password)
    bin_dir = bindir(echo)
    pg = layout(settings.home)
    host, port = url.host or "127.0.0.1", url.port or 5432
    if _running(bin_dir, pg):
        _require_passwords(pg, host, port, password, echo)
        _bootstrap(url, password, settings.home)
        return ServiceStatus(NAME, True, address, _pid(pg), "already running")
    if port_open(host, port):
        if _answers(url.render_as_string(hide_password=False)):
            echo(f"{NAME:<9} a server not started by drainer answers at {address}; using it")
            return ServiceStatus(NAME, True, address, None, "not started by drainer")
        raise ServiceError(
            f"port {port} is in use by another process; stop it or set DRAINER_DATABASE_URL "
            "to a PostgreSQL server"
        )
    if not pg.initialized:
        echo(f"{NAME:<9} initializing a cluster in {pg.data}")
        _initdb(bin_dir, pg, password)
    _write_conf(pg, host, port)
    echo(f"{NAME:<9} starting at {address}")
    _pg_ctl(bin_dir, pg, "start", "-w", "-t", str(START_TIMEOUT_SECONDS), "-l", str(pg.log))
    _require_passwords(pg, host, port, password, echo)
    _bootstrap(url, password, settings.home)
    return ServiceStatus(NAME, True, address, _pid(pg), "started")


def stop(settings: Settings, echo: Echo = print) -> ServiceStatus:
    """Stop our server with a fast shutdown (clients disconnected, data kept)."""
    url = make_url(settings.database_url)
    address = _address(url)
    if not settings.local_postgres:
        return ServiceStatus(NAME, _answers(settings.database_url), address, None, "not ours")
    pg = layout(settings.home, create=False)
    if not pg.initialized:
        return ServiceStatus(NAME, False, address, None, "not initialized")
    bin_dir = bindir(echo)
    if not _running(bin_dir, pg):
        return ServiceStatus(NAME, False, address, None, "not running")
    echo(f"{NAME:<9} stopping pid {_pid(pg)}")
    _pg_ctl(bin_dir, pg, "stop", "-m", "fast", "-w")
    return ServiceStatus(NAME, False, address, None, "stopped")


def status(settings: Settings) -> ServiceStatus:
    """Whether the URL's server answers, and whether it is the one we run."""
    url = make_url(settings.database_url)
    address = _address(url)
    if not settings.local_postgres:
        ok = _answers(settings.database_url)
        return ServiceStatus(NAME, ok, address, None, "external" if ok else "not reachable")
    pg = layout(settings.home, create=False)
    try:
        ours = _running(bindir(lambda _: None), pg) if pg.initialized else False
    except ServiceError:
        ours = False
    if ours:
        return ServiceStatus(NAME, True, address, _pid(pg), f"data in {pg.data}")
    if port_open(url.host or "127.0.0.1", url.port or 5432):
        ok = _answers(settings.database_url)
        detail = "not started by drainer" if ok else "port taken, not our database"
        return ServiceStatus(NAME, ok, address, None, detail)
    return ServiceStatus(NAME, False, address, None, "stopped")


def _address(url: URL) -> str:
    return f"{url.host}:{url.port or 5432}/{url.database}"


def _answers(database_url: str) -> bool:
    try:
        _check(database_url, "")
    except ServiceError:
        return False
    return True


def _check(database_url: str, source: str) -> None:
    """`select 1` through the URL, or a ServiceError that names it (password hidden)."""
    try:
        ping(psycopg_url(database_url))
    except psycopg.Error as exc:
        shown = make_url(database_url).render_as_string(hide_password=True)
        origin = f" ({source})" if source else ""
        raise ServiceError(f"PostgreSQL at {shown}{origin} is not reachable: {exc}") from exc


def _running(bin_dir: Path, pg: PgLayout) -> bool:
    if not pg.initialized:
        return False
    done = subprocess.run(
        pg.command([str(bin_dir / "pg_ctl"), "status", "-D", str(pg.data)]),
        cwd=pg.base,
        capture_output=True,
    )
    return done.returncode == 0


def _pid(pg: PgLayout) -> int | None:
    return process.read_pid(pg.data / "postmaster.pid")


def _initdb(bin_dir: Path, pg: PgLayout, password: str) -> None:
    # --no-locale: C collation, so initdb never fails on a container without generated locales.
    # The password file sits in the cluster's base (its owner reads it) for initdb's moment only.
    pwfile = pg.base / ".initdb-password"
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    pg.own(pwfile)
    cmd = [str(bin_dir / "initdb"), "-D", str(pg.data), f"--auth={AUTH}", "-U", SUPERUSER]
    cmd += [f"--pwfile={pwfile}", "--encoding=UTF8", "--no-locale"]
    try:
        _run(pg, cmd, "initdb")
    finally:
        pwfile.unlink(missing_ok=True)
    conf = pg.data / "postgresql.conf"
    with conf.open("a") as fh:
        fh.write("\n# local settings of drainer.services\n" + INCLUDE_LINE)


def _require_passwords(pg: PgLayout, host: str, port: int, password: str, echo: Echo) -> None:
    """Move a running cluster that trusts every local connection (initdb --auth=trust, as
    drainer made them before) to SCRAM: the superuser gets the generated password, then
    pg_hba.conf asks for it and the server reloads."""
    hba = pg.data / "pg_hba.conf"
    rules = hba.read_text()
    if not TRUST_RULE.search(rules):
        return
    echo(f"{NAME:<9} moving {pg.data} from trust to password ({AUTH}) authentication")
    hba.write_text(TRUST_RULE.sub(rf"\g<1>{AUTH}\g<2>", rules))
    try:
        require_password(make_conninfo(host=host, port=port, user=SUPERUSER), SUPERUSER, password)
    except psycopg.Error as exc:
        hba.write_text(rules)  # the next `up` tries again from where it was
        raise ServiceError(
            f"could not set a password on {pg.data}'s {SUPERUSER} role: {exc}"
        ) from exc


def _write_conf(pg: PgLayout, host: str, port: int) -> None:
    """Loopback only, at the URL's port; resource limits modest, durability untouched."""
    conf = pg.data / "drainer.conf"
    conf.write_text(
        "# generated by drainer.services; rewritten on every start\n"
        f"listen_addresses = '{host}'\n"
        f"port = {port}\n"
        f"unix_socket_directories = '{pg.socket_dir}'\n"
        "shared_buffers = '128MB'\n"
        "max_connections = 200\n"
    )
    pg.own(conf)


def _pg_ctl(bin_dir: Path, pg: PgLayout, *args: str) -> None:
    _run(pg, [str(bin_dir / "pg_ctl"), *args, "-D", str(pg.data)], f"pg_ctl {args[0]}")


def _run(pg: PgLayout, argv: list[str], what: str) -> None:
    # own session: a Ctrl-C in the terminal that ran `up` must not reach the postmaster
    done = subprocess.run(
        pg.command(argv),
        cwd=pg.base,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    if done.returncode != 0:
        raise ServiceError(
            f"{what} failed (exit {done.returncode}):\n{done.stdout.strip()}\n"
            f"last lines of {pg.log}:\n{process.tail(pg.log, 30)}"
        )


def _bootstrap(url: URL, password: str, home: Path) -> None:
    """Create the URL's role (superuser, it is a dev box) and database when missing."""
    try:
        create_role_and_database(url, SUPERUSER, password)
    except psycopg.Error as exc:
        hint = ""
        if "password authentication failed" in str(exc):
            hint = (
                f"; the server was set up with another password than the one in "
                f"{secret_path(home, POSTGRES_PASSWORD)}: put that one back, or stop the server "
                "and delete its cluster folder (`drainer services status` names it) to start afresh"
            )
        raise ServiceError(
            f"could not create role/database of {url.render_as_string(hide_password=True)} "
            f"as {SUPERUSER}: {exc}{hint}"
        ) from exc
