"""The local stack as anyone else on the machine meets it: Postgres asks for a password (SCRAM),
the Spark Connect server for a token; both are generated into the drainer home (0600), never on a
command line, and a cluster an older drainer left on `trust` is moved over by `services up`."""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession
from sqlalchemy.engine import make_url

from drainer.local_secrets import CONNECT_TOKEN, POSTGRES_PASSWORD, read_secret, secret_path
from drainer.services import connect, postgres
from drainer.services.pg_layout import layout
from drainer.settings import load_settings, psycopg_url
from spark_jobs.session import drop_client

pytestmark = pytest.mark.integration


def _local_only() -> None:
    settings = load_settings()
    if not (settings.local_postgres and settings.local_spark_connect):
        pytest.skip("DRAINER_DATABASE_URL or SPARK_REMOTE/SPARK_MASTER is set: not our servers")


def _command_lines() -> str:
    """Every process's command line, as `ps` shows them to any user of the machine."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue  # ended meanwhile
    return "\n".join(lines)


def test_secrets_are_files_of_the_home_only_its_owner_reads(stack, dagster_stack) -> None:
    """Nor on any command line: Dagster's webserver, daemon and the code servers they start
    (which get the instance's settings on theirs) are up while it looks."""
    _local_only()
    home = load_settings().home
    for name in (POSTGRES_PASSWORD, CONNECT_TOKEN):
        path = secret_path(home, name)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700, path.parent
        secret = read_secret(home, name)
        assert secret and len(secret) >= 32
        assert secret not in _command_lines(), f"the {name} is on a command line"


def test_postgres_refuses_connections_without_the_generated_password(stack) -> None:
    _local_only()
    url = make_url(load_settings().database_url)
    assert url.password == read_secret(load_settings().home, POSTGRES_PASSWORD)
    for password in (None, "wrong-" + (url.password or "")[:8]):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(
                host=url.host,
                port=url.port,
                user=url.username,
                password=password,
                dbname=url.database,
                connect_timeout=5,
            ).close()
    # the superuser, over the unix socket, too: no `trust` rule is left anywhere
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(
            host=str(layout(load_settings().home, create=False).socket_dir),
            port=url.port,
            user=postgres.SUPERUSER,
            dbname="postgres",
            connect_timeout=5,
        ).close()
    with psycopg.connect(psycopg_url(load_settings().database_url), connect_timeout=5) as conn:
        assert conn.execute("select 1").fetchone() == (1,)


def test_connect_server_refuses_a_client_without_the_token(spark) -> None:
    _local_only()
    port = load_settings().connect_port
    for remote in (f"sc://localhost:{port}", f"sc://localhost:{port}/;token=not-the-token"):
        stranger = SparkSession.builder.remote(remote).create()
        try:
            with pytest.raises(Exception, match="UNAUTHENTICATED"):
                stranger.range(1).count()
        finally:  # nothing of it is on the server; kept from the garbage collector
            drop_client(stranger)
    assert spark.range(3).count() == 3  # drainer's own session: it sends the token


def test_a_trust_cluster_of_an_older_drainer_moves_to_scram(tmp_path, monkeypatch) -> None:
    """Before: initdb --auth=trust, so every local user could connect as the superuser. An
    existing cluster of that kind gets the generated password and pg_hba.conf asks for it."""
    _local_only()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = tmp_path / "home"
    settings = dataclasses.replace(
        load_settings(),
        home=home,
        database_url=f"postgresql+psycopg://drainer@127.0.0.1:{port}/drainer",
        database_url_from_env=False,
    )
    monkeypatch.setattr(postgres, "AUTH", "trust")  # as drainer made clusters before
    postgres.up(settings, echo=lambda _: None)
    try:
        postgres.stop(settings, echo=lambda _: None)
        secret_path(home, POSTGRES_PASSWORD).unlink()  # an older drainer kept none
        anyone = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        monkeypatch.undo()
        said: list[str] = []
        postgres.up(settings, echo=said.append)
        assert any("from trust to password" in line for line in said), said
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(anyone, connect_timeout=5).close()
        password = read_secret(home, POSTGRES_PASSWORD)
        hba = (layout(home, create=False).data / "pg_hba.conf").read_text()
        assert postgres.TRUST_RULE.search(hba) is None and "scram-sha-256" in hba
        for user in ("postgres", "drainer"):
            with psycopg.connect(
                f"postgresql://{user}:{password}@127.0.0.1:{port}/drainer", connect_timeout=5
            ) as conn:
                assert conn.execute("select current_user").fetchone() == (user,)
        again: list[str] = []
        postgres.up(settings, echo=again.append)  # idempotent: nothing left to move
        assert not any("from trust" in line for line in again), again
    finally:
        postgres.stop(settings, echo=lambda _: None)


def test_status_and_a_run_show_neither_secret(stack, make_drain) -> None:
    """What a user pastes into an issue (status, a verbose run's output) and the servers' logs
    hold neither the password nor the token."""
    _local_only()
    settings = load_settings()
    secrets = [read_secret(settings.home, n) for n in (POSTGRES_PASSWORD, CONNECT_TOKEN)]
    drain = make_drain(levels=1, partitions=1, budget=10)
    outputs = []
    for args in (["services", "status"], ["-v", "run", drain.name, "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "spark_jobs.cli", *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "COLUMNS": "250"},
        )
        assert done.returncode == 0, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
        outputs.append(done.stdout + done.stderr)
    assert "sc://localhost" in outputs[0] and "127.0.0.1:" in outputs[0]
    server = connect.ConnectPaths.local(settings)
    logs = [
        layout(settings.home, create=False).log,
        *server.root.glob(f"{server.console_log.name}*"),  # this server's and the last one's
        *server.root.glob(f"{server.server_log.name}*"),  # Spark's log and its rolled-over ones
    ]
    assert server.server_log in logs
    for secret in secrets:
        assert secret
        for output in outputs:
            assert secret not in output
        for log in logs:
            with log.open(errors="replace") as lines:  # line by line: a log may be large
                assert not any(secret in line for line in lines), log
