"""The Postgres sink's staging on the real Postgres: quoted names, one attempt's rows per task."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
from sqlalchemy import text

from drainer.settings import load_settings, psycopg_url
from drainer.store import get_engine, sinks

COLUMNS = [('we"ird col', "text"), ("n", "integer")]


def _fresh_table() -> str:
    table = f"sink_{uuid.uuid4().hex[:8]}"
    sinks.ensure_sink_tables(get_engine(), table, COLUMNS)
    return table


def _staged(table: str, run_id: int) -> list[tuple]:
    with get_engine().connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                text(
                    f'SELECT "we""ird col", n FROM "{sinks.staging_name(table)}" '
                    f'WHERE "{sinks.RUN_COLUMN}" = :r ORDER BY n'
                ),
                {"r": run_id},
            )
        ]


def test_output_columns_are_quoted_identifiers():
    table = _fresh_table()
    names = [name for name, _ in COLUMNS]
    with psycopg.connect(psycopg_url(load_settings().database_url)) as conn:
        sinks.write_staged(conn, table, names, 1, "p0", [("x", 1), ("y", 2)])
    with get_engine().begin() as conn:
        assert sinks.publish_staged(conn, table, 1) == 2
        assert sinks.table_columns(conn, table) == names


def test_two_attempts_of_one_task_leave_one_attempts_rows():
    """Attempt A stages and holds its transaction open; attempt B of the same (run, task)
    starts meanwhile. B must wait for A and then replace A's rows, not add to them."""
    table = _fresh_table()
    names = [name for name, _ in COLUMNS]
    url = psycopg_url(load_settings().database_url)
    a_staging, release_a = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def rows_of_a():
        yield ("a", 1)
        yield ("a", 2)
        a_staging.set()
        release_a.wait(10)
        yield ("a", 3)

    def attempt(rows) -> None:
        try:
            with psycopg.connect(url) as conn:
                sinks.write_staged(conn, table, names, 7, "topic:0:100", rows)
        except BaseException as err:  # surfaced by the assertion below
            errors.append(err)

    a = threading.Thread(target=attempt, args=(rows_of_a(),))
    a.start()
    assert a_staging.wait(10)
    b = threading.Thread(target=attempt, args=([("b", 10), ("b", 20)],))
    b.start()
    # B either finishes at once (no lock: the defect) or waits on A's lock
    deadline = time.monotonic() + 5
    while b.is_alive() and not _waits_on_advisory_lock() and time.monotonic() < deadline:
        time.sleep(0.05)
    release_a.set()
    a.join(10)
    b.join(10)
    assert not errors, errors
    assert _staged(table, 7) == [("b", 10), ("b", 20)]  # the later attempt's rows only


def _waits_on_advisory_lock() -> bool:
    with get_engine().connect() as conn:
        return bool(
            conn.scalar(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            )
        )
