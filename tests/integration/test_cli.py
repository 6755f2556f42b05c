"""The CLI as a user types it: produce from stdin, run, status, rewind (audited)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from offsets import level_watermarks
from sqlalchemy import text

from drainer.settings import load_settings
from tests.support.stack import get_engine


def drainer(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_produce_run_status_rewind(make_drain):
    drain = make_drain(partitions=1)
    created = drainer("topics", "create", drain.name)
    assert created.returncode == 0 and "exists" in created.stdout  # the fixture made them already

    bad = drainer("produce", drain.name, "--level", "1", "--stdin", stdin='{"value": 1}\n{oops\n')
    assert bad.returncode == 2 and "stdin line 2 is not JSON" in bad.stderr
    assert all(wm.high == 0 for wm in level_watermarks(drain, [1]).values())

    lines = "".join(json.dumps({"key": f"k{i % 3}", "value": {"n": i}}) + "\n" for i in range(50))
    good = drainer("produce", drain.name, "--level", "1", "--stdin", stdin=lines)
    assert good.returncode == 0, good.stderr
    assert "produced 50 records" in good.stdout

    run = drainer("run", drain.name, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["drained"] == 50

    status = json.loads(drainer("status", drain.name, "--json").stdout)
    level1 = next(lv for lv in status["levels"] if lv["level"] == 1)
    assert level1["backlog"] == 0 and level1["committed"] == 50
    assert status["runs"][0]["drained"] == 50 and status["runs"][0]["status"] == "committed"

    rewound = drainer("rewind", drain.name, "--level", "1", "--to-offset", "20", "--reason", "test")
    assert rewound.returncode == 0, rewound.stderr
    with get_engine().connect() as conn:
        audit = conn.execute(
            text("SELECT from_offset, to_offset, reason FROM offset_rewinds WHERE drain = :d"),
            {"d": drain.name},
        ).one()
    assert (audit.from_offset, audit.to_offset, audit.reason) == (50, 20, "test")
    again = json.loads(drainer("run", drain.name, "--json").stdout)
    assert again["drained"] == 30  # offsets 20..49 are drained again, on purpose

    from drainer.observe.checks import offsets_never_backwards

    assert offsets_never_backwards(
        drain, load_settings()
    ).passed  # the audited rewind is not a regression


def test_unreachable_broker_is_a_clear_error(make_drain, monkeypatch):
    drain = make_drain()
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    done = drainer("plan", drain.name)
    assert done.returncode == 2
    assert "did not answer" in done.stderr and "KAFKA_BOOTSTRAP_SERVERS" in done.stderr


def test_a_process_ending_closes_its_postgres_connections():
    """`exit_process` disposes the pools before it skips the last collections: the server sees
    each connection end, not a dropped socket."""
    from drainer.store.engine import dispose_engines

    engine = get_engine()
    with engine.connect() as conn:
        backend = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    assert engine.pool.checkedin() >= 1
    dispose_engines()
    assert engine.pool.checkedin() == 0
    deadline = time.monotonic() + 10  # the backend ends on the client's Terminate message
    with engine.connect() as conn:  # the engine stays usable
        while (
            live := conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": backend}
            ).scalar_one()
        ) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert live == 0
