"""The first hour of a new user, on the real stack: every failure one line, an exit code the
README documents, the cause last and the fix named (issue 31)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from sqlalchemy import text

from drainer.kafka.producer import OutRecord
from tests.support.stack import get_engine, produce_records

DRAINER = [sys.executable, "-m", "spark_jobs.cli"]
USER_MODULE = """
def transform(df):
    return df.select("level")


def handle(record):
    return {"id": record.value.decode(), "amount": 1.0}
"""


def cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*DRAINER, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "120", **env},
    )


def report(stderr: str) -> list[str]:
    """The error's lines: from drainer's `drainer:` line on (log lines before it are progress)."""
    return [line for line in stderr[stderr.index("drainer: ") :].splitlines() if line.strip()]


def user_drain(tmp_path: Path, make_drain, **overrides) -> tuple[object, Path]:
    """A drain whose code is a module in a temporary folder, as a newcomer writes it."""
    folder = tmp_path / "mycode"
    folder.mkdir()
    (folder / "nbproc_first_hour.py").write_text(USER_MODULE)
    return make_drain(levels=1, partitions=1, **overrides), folder


def test_a_handler_only_this_shell_can_import_runs_on_the_connect_server(
    tmp_path, make_drain, spark
):
    """Before: `plan` exited 0; the run's first attempt printed a 70-line traceback and exited
    1 ("check that the module is installed"). Then both refused in one line, asking to restart
    the shared server from this shell. Now the module travels with the run's session: the
    server, started without it on its PYTHONPATH, runs it as it is."""
    drain, folder = user_drain(
        tmp_path,
        make_drain,
        mode="record",
        handler="nbproc_first_hour:handle",
        output_schema="id string, amount double",
    )
    produce_records(drain, [OutRecord(value=b'{"id": 1, "amount": 2.5}', key=b"k")], 0)
    # this shell has the module on PYTHONPATH; the Connect server was started without it
    shell = {"PYTHONPATH": str(folder)}
    planned = cli("plan", drain.name, **shell)
    assert planned.returncode == 0, planned.stderr[-2000:]
    ran = cli("run", drain.name, **shell)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "1 records in" in ran.stdout, ran.stdout


def test_a_processor_that_does_not_import_here_is_refused_by_plan(tmp_path, make_drain):
    """Before: `drainer plan` exited 0, and the run failed later after storing a plan."""
    drain, folder = user_drain(tmp_path, make_drain, processor="nbproc_first_hour:transform")
    planned = cli("plan", drain.name)  # no PYTHONPATH: the module's folder is unknown here
    assert planned.returncode == 2, planned.stderr[-2000:]
    [line] = report(planned.stderr)
    assert "module 'nbproc_first_hour' does not import in this process" in line, line
    assert "put the folder that holds it on PYTHONPATH" in line, line
    assert cli("plan", drain.name, PYTHONPATH=str(folder)).returncode == 0  # the fix works


def test_topics_create_states_the_real_partition_count_and_the_fix(tmp_path, make_drain):
    """Before: existing 2-partition topics with `partitions: 4` printed `exists (4 partitions)`."""
    import time

    drain = make_drain(levels=1, partitions=2)
    config = tmp_path / "wider.yaml"
    body = yaml.safe_load(Path(os.environ["DRAINER_CONFIG"]).read_text())
    body["drains"][drain.name]["partitions"] = 4
    config.write_text(yaml.safe_dump(body))
    done = cli("topics", "create", drain.name, DRAINER_CONFIG=str(config))
    assert done.returncode == 0, done.stderr
    assert f"{drain.level_topic(0)}" in done.stdout and "exists (2 partitions)" in done.stdout
    [warning] = [line for line in done.stderr.splitlines() if line.strip()]
    assert "2 partitions, not the 4" in warning and "set `partitions: 2`" in warning

    # produce to a level topic that does not exist: one line at once, not a 30 s wait
    started = time.monotonic()
    body["drains"][drain.name]["levels"] = 2  # level 1's topic was never created
    config.write_text(yaml.safe_dump(body))
    missing = cli("produce", drain.name, "--level", "1", "--count", "1", DRAINER_CONFIG=str(config))
    assert missing.returncode == 2, missing.stderr
    assert time.monotonic() - started < 15
    [line] = report(missing.stderr)
    assert f"{drain.level_topic(1)} of drain '{drain.name}' does not exist" in line
    assert f"`drainer topics create {drain.name}`" in line


def test_a_handler_row_postgres_cannot_store_fails_that_record_not_the_run(make_drain, spark):
    """Before: the string "lots" in the double column `amount` failed the whole run's COPY on
    every attempt; now it is that record's failure (dead-lettered at max_attempts: 1) and the
    other records are drained."""
    from tests.processors import AMOUNT_SCHEMA

    drain = make_drain(
        levels=1,
        partitions=1,
        mode="record",
        handler="tests.processors:amount_or_lots",
        output_schema=AMOUNT_SCHEMA,
        max_attempts=1,
        ordering="unordered",
    )
    values = [b"a", b"lots", b"b"]
    produce_records(drain, [OutRecord(value=v, key=v) for v in values], 0)
    done = cli("run", drain.name, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    listed = cli("dlq", "list", drain.name, "--json")
    [dead] = json.loads(listed.stdout)
    assert dead["offset"] == 1
    assert "column 'amount' (double precision) got str 'lots'" in dead["error"], dead
    with get_engine().connect() as conn:
        rows = conn.execute(text(f"SELECT id FROM {drain.sink.table} ORDER BY id")).all()
    assert [r.id for r in rows] == ["a", "b"]


def test_an_extra_key_in_a_handler_row_is_the_records_error_naming_the_key(make_drain, spark):
    """Before: the key `note`, not a column, was dropped without a word."""
    from tests.processors import AMOUNT_SCHEMA

    drain = make_drain(
        levels=1,
        partitions=1,
        mode="record",
        handler="tests.processors:amount_and_a_note",
        output_schema=AMOUNT_SCHEMA,
        max_attempts=1,
    )
    produce_records(drain, [OutRecord(value=b"a", key=b"k")], 0)
    assert cli("run", drain.name).returncode == 0
    [dead] = json.loads(cli("dlq", "list", drain.name, "--json").stdout)
    assert "handler row has key 'note', which is not a column of output_schema" in dead["error"]
