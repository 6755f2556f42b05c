"""Two users' own processor modules on one shared Spark Connect server, which never restarts for
them (issue 52): each shell's module, from a folder the server's PYTHONPATH does not hold,
travels with its run's session, and an edit of it is what the next run imports.

Both users name their module alike (`userproc_<suffix>`), so a run that imported the other's
module, or a stale copy of its own, would write the other's label: each run's rows carry the
label of the module its shell has, through a record-mode handler (imported by the server's
workers) and a dataframe processor's Python UDF (pickled by reference to its module). The label
lives in a helper module beside the processor's, which imports it: shipped too, and the edit
is made there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from drainer.config import load_drains
from drainer.services.connect import MARKER, ConnectPaths
from drainer.services.process import our_pid
from drainer.settings import load_settings
from tests.support.drains import delete_topics
from tests.support.stack import get_engine
from tests.support.user_modules import HANDLER_OUTPUT, write_user_handler

pytestmark = pytest.mark.slow

DRAINER = str(Path(sys.executable).with_name("drainer"))
MODULE = """
from pyspark.sql import functions as F, types as T

import {helper} as helper


def handle(record):
    return {{"who": helper.WHO, "offset": record.offset}}


def who_is(offset):  # pickled by reference: the server's workers import this module
    return helper.WHO


def transform(df):
    return df.select(F.udf(who_is, T.StringType())("offset").alias("who"), "offset")
"""


class Shell:
    """A user's shell in their own folder: their drains file, their module, their PYTHONPATH."""

    def __init__(self, folder: Path, module: str, who: str, drain: str, mode: str) -> None:
        self.folder, self.module, self.drain = folder, module, drain
        folder.mkdir()
        self.label(who)
        body: dict = {
            "topic": drain,
            "group": drain,
            "levels": 1,
            "partitions": 1,
            "budget": 100,
            "schedule": None,
            "sink": {"type": "postgres", "table": drain},
        }
        if mode == "record":
            body |= {
                "mode": "record",
                "handler": f"{module}:handle",
                "output_schema": "who string, offset long",
            }
        else:
            body["processor"] = f"{module}:transform"
        (folder / "drains.yaml").write_text(yaml.safe_dump({"drains": {drain: body}}))
        self.env = {k: v for k, v in os.environ.items() if k != "DRAINER_CONFIG"}
        self.env["PYTHONPATH"] = str(folder)  # theirs only: not the server's

    def label(self, who: str) -> None:
        """The label, in a helper module beside the processor's (which imports it)."""
        helper = f"{self.module}_helper"
        (self.folder / f"{self.module}.py").write_text(MODULE.format(helper=helper))
        (self.folder / f"{helper}.py").write_text(f"WHO = {who!r}\n")

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [DRAINER, *args],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=self.folder,
            env=self.env,
        )
        assert done.returncode == 0, (args, done.stderr[-3000:])
        return done.stdout

    def drain_once(self, records: int) -> dict:
        self("produce", self.drain, "--count", str(records))
        result = json.loads(self("run", self.drain, "--json"))
        assert result["drained"] == records, result
        return result

    def rows(self) -> list[tuple[str, int]]:
        with get_engine().connect() as conn:
            found = conn.execute(text(f'SELECT who, "offset" FROM {self.drain} ORDER BY 2'))
            return [(r.who, r.offset) for r in found]


def test_two_users_modules_run_on_one_server_without_a_restart_and_an_edit_is_picked_up(
    tmp_path, stack
):
    settings = load_settings()
    assert settings.local_spark_connect, "this test is about the local Connect server"
    server = ConnectPaths.local(settings)
    suffix = uuid.uuid4().hex[:8]
    module = f"userproc_{suffix}"
    alice = Shell(tmp_path / "alice", module, "alice", f"ship_a_{suffix}", "record")
    bob = Shell(tmp_path / "bob", module, "bob", f"ship_b_{suffix}", "dataframe")
    try:
        alice("services", "up")
        pid = our_pid(server.pid_file, MARKER)
        assert pid is not None
        for shell in (alice, bob):
            up = shell("services", "up")  # another PYTHONPATH: no reason to restart
            assert "restarting" not in up, up
            shell("topics", "create", shell.drain)
            shell("plan", shell.drain)  # the handler imports in a task of the server
        alice.drain_once(3)
        bob.drain_once(2)
        assert alice.rows() == [("alice", 0), ("alice", 1), ("alice", 2)]
        assert bob.rows() == [("bob", 0), ("bob", 1)]

        alice.label("alice, edited")  # the next run imports the edit, not a warm worker's copy
        bob.label("bob, edited")
        alice.drain_once(1)
        bob.drain_once(1)
        assert alice.rows()[-1] == ("alice, edited", 3)
        assert bob.rows()[-1] == ("bob, edited", 2)
        assert our_pid(server.pid_file, MARKER) == pid  # one server all along
    finally:
        for shell in (alice, bob):
            for drain in load_drains(shell.folder / "drains.yaml").values():
                delete_topics(drain)


def test_a_drain_handed_in_as_an_object_ships_its_own_handlers_module(
    tmp_path, make_drain, monkeypatch
):
    """A drain that is not in the drains file (handed to `drain_job.run` as an object, as an
    orchestrator's code may) still gets its handler's module shipped: the run's session is made
    for its own callables too, not only for the drains file's."""
    from drainer.kafka.producer import OutRecord
    from spark_jobs import drain_job
    from tests.support.stack import produce_records

    folder = tmp_path / "mine"
    handler = write_user_handler(folder, "mine")
    monkeypatch.syspath_prepend(str(folder))  # this process imports it; the server cannot
    drain = make_drain(
        levels=1, partitions=1, mode="record", handler=handler, output_schema=HANDLER_OUTPUT
    )
    make_drain(levels=1, partitions=1)  # the drains file is now another, without `drain`
    assert drain.name not in load_drains(load_settings().config_path)
    produce_records(drain, [OutRecord(value=b"v", key=b"k")] * 3, level=0)
    result = drain_job.run(drain, trigger="test", settings=load_settings())
    assert result.drained == 3
    with get_engine().connect() as conn:
        who = conn.execute(text(f'SELECT who FROM "{drain.sink.table}"')).scalars().all()
    assert who == ["mine"] * 3
