"""Issue 8: Postgres lost while Spark tasks write ends `drainer run` with one line, exit 2.

The test runs its own throwaway PostgreSQL server (the shared one must never stop) and points
a `drainer run` subprocess at it; the Spark tasks connect to the URL the driver hands them, so
they write to the throwaway server too. Once the run has staged a chunk, the server is stopped
with an immediate shutdown (no clean disconnect, like a crash). The CLI must then say, on one
line, that Postgres was lost and why, with no Python or Java trace; after a restart the next run
resumes the plan and every record is in the sink exactly once.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from drainer.kafka.producer import synthetic_records
from drainer.services.pg_install import bindir
from drainer.services.pg_layout import OS_USER, ROOT_BASE, PgLayout
from drainer.store.server import create_role_and_database
from drainer.store.sink_names import stage_name
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.drains import create_drain, delete_topics
from tests.support.stack import produce_records

RECORDS = 40_000  # four 10,000-record chunks: the server stops while later chunks are to come
CLI = [sys.executable, "-m", "spark_jobs.cli"]


class ThrowawayPostgres:
    """A PostgreSQL server of the test's own on a free loopback port, as `postgres` when root."""

    def __init__(self, base: Path) -> None:
        self.bin = bindir(lambda _: None)
        self.pg = PgLayout(base, OS_USER if os.geteuid() == 0 else None)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://drainer@127.0.0.1:{self.port}/drainer_lost_mid_run"

    def init(self) -> None:
        self.pg.base.mkdir(parents=True)
        self.pg.own(self.pg.base)
        self.pg.base.chmod(0o700)
        self._run("initdb", "-D", str(self.pg.data), "--auth=trust", "-U", "postgres",
                  "--no-locale", "--encoding=UTF8")  # fmt: skip
        with (self.pg.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.pg.socket_dir}'\nmax_connections = 100\n"
            )
        self.start()
        create_role_and_database(make_url(self.url), "postgres")

    def start(self) -> None:
        self._run("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.pg.data), "-l",
                  str(self.pg.log))  # fmt: skip

    def stop_immediately(self) -> None:
        self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(self.pg.data))

    def running(self) -> bool:
        return (
            subprocess.run(
                self.pg.command([str(self.bin / "pg_ctl"), "status", "-D", str(self.pg.data)]),
                cwd=self.pg.base,
                capture_output=True,
            ).returncode
            == 0
        )

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            self.pg.command([str(self.bin / program), *args]),
            cwd=self.pg.base,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            start_new_session=True,  # a Ctrl-C of pytest must not reach the postmaster
        )
        assert done.returncode == 0, f"{program} {args[0]}: {done.stdout}{done.stderr}"


@pytest.fixture
def throwaway_postgres(tmp_path: Path) -> Iterator[ThrowawayPostgres]:
    # as root the server runs as `postgres`, which cannot reach pytest's tmp_path under /root
    base = (
        ROOT_BASE / f"test-lost-{uuid.uuid4().hex[:8]}"
        if os.geteuid() == 0
        else tmp_path / "postgres"
    )
    server = ThrowawayPostgres(base)
    try:
        server.init()
        yield server
    finally:
        if server.running():
            server.stop_immediately()
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _staged(url: str, drain: str, table: str) -> int:
    """Rows in the stage table of the drain's (only) run, 0 before there is one."""
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            run = conn.execute("SELECT max(id) FROM runs WHERE drain = %s", (drain,)).fetchone()
            if run[0] is None:
                return 0
            stage = stage_name(table, run[0])
            if conn.execute("SELECT to_regclass(%s)", (stage,)).fetchone()[0] is None:
                return 0
            query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(stage))
            return conn.execute(query).fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return 0  # the schema is not migrated yet
    except psycopg.OperationalError:
        return 0


def _run(drain_name: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, *args, "run", drain_name],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)  # its own Postgres, stopped and started
def test_postgres_lost_while_tasks_write_is_one_line_and_the_rerun_loses_nothing(
    stack, spark, tmp_path, throwaway_postgres
):
    server = throwaway_postgres
    drain, config = create_drain(
        tmp_path,
        prefix="lost",
        levels=1,
        partitions=1,
        budget=RECORDS,
        mode="record",
        handler="spark_jobs.examples:slow_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        ordering="key",
        max_concurrency=4,  # ~6 s per chunk here: time to stop the server between chunks
    )
    try:
        produce_records(drain, synthetic_records(RECORDS, keys=97, value_size=20), 0, 0)
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DRAINER_FAULT", "DRAINER_DATABASE_URL")
        }
        env.update(
            DRAINER_DATABASE_URL=server.url, DRAINER_CONFIG=str(config), COLUMNS="1000"
        )  # COLUMNS: one message, unwrapped

        proc = _run(drain.name, env, "-v")
        deadline = time.monotonic() + 300
        while _staged(server.url, drain.name, drain.sink.table) == 0:
            assert proc.poll() is None, f"the run ended before staging: {proc.communicate()}"
            assert time.monotonic() < deadline, "nothing was staged within 300 s"
            time.sleep(0.2)
        server.stop_immediately()
        out, err = proc.communicate(timeout=300)

        assert proc.returncode == 2, err[-5000:]
        errors = [line for line in err.splitlines() if line.startswith("drainer:")]
        assert len(errors) == 1, err[-5000:]
        assert "Postgres was lost while Spark tasks wrote" in errors[0]
        assert "psycopg.OperationalError" in errors[0]  # the root cause, by name
        # the full trace is in the log, at DEBUG (-v), and only there
        assert "DEBUG" in err and "; the Spark error was" in err
        quiet = err.split("; the Spark error was")[0]
        for noise in ("Traceback", "py4j", "at org.apache"):
            assert noise not in quiet, err[-5000:]
        warnings = [line for line in err.splitlines() if " WARNING " in f" {line} "]
        assert not warnings, warnings

        server.start()
        assert (
            _staged(server.url, drain.name, drain.sink.table) > 0
        )  # the failed run left its stage table

        done = _run(drain.name, env)
        out, err = done.communicate(timeout=600)
        assert done.returncode == 0, err[-5000:]
        with psycopg.connect(server.url) as conn:
            query = sql.SQL('SELECT count(*), count(DISTINCT "offset") FROM {}').format(
                sql.Identifier(drain.sink.table)
            )
            rows, offsets = conn.execute(query).fetchone()
            resumed = conn.execute("SELECT count(*) FROM runs WHERE drain = %s", (drain.name,))
            assert resumed.fetchone()[0] == 1  # the same plan, resumed, not a second one
        assert (rows, offsets) == (RECORDS, RECORDS)
    finally:
        delete_topics(drain)
