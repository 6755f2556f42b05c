"""The newcomer's path, end to end through the `drainer` command (issue 31, acceptance).

A fresh folder holds a drains file and the newcomer's own module: a dataframe drain into Iceberg
whose processor is in that module, and a record-mode drain into Postgres (max_attempts,
max_wait, run_seconds, ordering: key) whose handler fails on some records. The newcomer makes
the usual mistakes on the way, in the order the docs lead them, and follows each message:

every failure exits with a code the README documents (2: a problem you can fix, 3: the drain is
held), prints at most 3 lines from its `drainer:` line on, no traceback, and names the fix (a
command or a setting), and doing what it says works.

Lines before the `drainer:` line are INFO progress lines of the command (what it did before it
failed: "planned run 4 …"); they are logging, not the error, and stay: a newcomer sees what
happened, and `-v` adds the detail. The test counts them too, so a failure that starts logging
its traceback there fails it.
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
from tests.support.drains import delete_topics
from tests.support.stack import get_engine

# `drainer services up` restarts the Connect server every test shares, with its folder
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# the console script a newcomer types: `python -m` would put the folder itself on sys.path
DRAINER = [str(Path(sys.executable).with_name("drainer"))]
MODULE = """
import json

from pyspark.sql import functions as F


def transform(df):
    return df.select("level", F.col("key").cast("string").alias("key"), F.length("value").alias("size"))


def handle(record):
    order = json.loads(record.value)
    if order["amount"] < 0:
        raise ValueError(f"order {order['id']}: negative amount {order['amount']}")
    return {"id": str(order["id"]), "amount": float(order["amount"])}
"""
DOCUMENTED_EXIT_CODES = (2, 3)  # README: 2 a problem you can fix, 3 another run holds the drain


class Newcomer:
    """A shell in the newcomer's folder: `drainer` as they type it, with their environment."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {
            k: v for k, v in os.environ.items() if k not in ("DRAINER_CONFIG", "PYTHONPATH")
        }
        self.env["COLUMNS"] = "120"

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*DRAINER, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=self.folder,
            env=self.env,
        )

    def ok(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        done = self(*args, stdin=stdin)
        assert done.returncode == 0, (args, done.stderr[-3000:])
        return done

    def fails(self, *args: str, fix: str, stdin: str | None = None) -> str:
        """The command fails as documented; returns its error, which names `fix`."""
        done = self(*args, stdin=stdin)
        assert done.returncode in DOCUMENTED_EXIT_CODES, (args, done.returncode, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert "drainer: " in done.stderr, (args, done.stderr)
        error = done.stderr[done.stderr.index("drainer: ") :]
        lines = [line for line in error.splitlines() if line.strip()]
        assert len(lines) <= 3, (args, lines)
        progress = [line for line in done.stderr[: done.stderr.index("drainer: ")].splitlines()]
        assert len([line for line in progress if line.strip()]) <= 5, (args, progress)
        message = " ".join(lines)
        assert fix in message, (args, fix, message)
        return message


@pytest.fixture
def newcomer(tmp_path, lakehouse):
    """The folder, the module and the drains file; the drains' topics deleted afterwards."""
    suffix = uuid.uuid4().hex[:8]
    module = f"nbnew_{suffix}"
    (tmp_path / f"{module}.py").write_text(MODULE)
    lake, orders = f"lake_{suffix}", f"orders_{suffix}"
    drains = {
        lake: {
            "topic": lake,
            "group": lake,
            "levels": 2,
            "partitions": 1,
            "budget": 100,
            "schedule": None,
            "processor": f"{module}:transform",
            "sink": {"type": "iceberg", "table": f"drains.{lake}"},
        },
        orders: {
            "topic": orders,
            "group": orders,
            "levels": 2,
            "partitions": 1,
            "budget": 100,
            "schedule": None,
            "mode": "record",
            "handler": f"{module}:handle",
            "output_schema": "id string, amount double",
            "ordering": "key",
            "max_attempts": 2,
            "max_wait": "1h",
            "run_seconds": 60,
            "sink": {"type": "postgres", "table": orders},
        },
    }
    shell = Newcomer(tmp_path)
    try:
        yield shell, module, lake, orders, drains
    finally:
        if (tmp_path / "drains.yaml").exists():
            for drain in load_drains(tmp_path / "drains.yaml").values():
                delete_topics(drain)


def test_the_newcomer_path_every_failure_is_short_documented_and_names_its_fix(newcomer):
    drainer, module, lake, orders, drains = newcomer
    folder = drainer.folder
    config = folder / "drains.yaml"

    # a typo in the drains file: the setting's path and the values it takes
    typo = {**drains, orders: {**drains[orders], "ordering": "keys"}}
    config.write_text(yaml.safe_dump({"drains": typo}))
    drainer.fails("plan", orders, fix=f"{orders}.ordering")
    config.write_text(yaml.safe_dump({"drains": drains}))

    # producing before the topics exist names `drainer topics create`
    drainer.fails("produce", orders, "--count", "1", fix=f"`drainer topics create {orders}`")
    drainer.fails("run", "orderz", fix=orders)  # an unknown drain lists the known ones
    for name in (lake, orders):
        drainer.ok("topics", "create", name)

    # the newcomer's module is not on PYTHONPATH here: plan and run refuse, naming PYTHONPATH
    drainer.fails("plan", lake, fix="put the folder that holds it on PYTHONPATH")
    drainer.fails("run", lake, fix="put the folder that holds it on PYTHONPATH")
    drainer.fails("plan", orders, fix="put the folder that holds it on PYTHONPATH")
    # on this shell's PYTHONPATH, but the Connect server was started without it
    drainer.env["PYTHONPATH"] = str(folder)
    drainer.fails("plan", orders, fix="`drainer services up` from this shell")
    drainer.ok("services", "up")  # as the message says: restarts the server with the folder
    drainer.ok("plan", orders)
    drainer.ok("plan", lake)

    # records: bad input is refused at once, naming what is wrong
    drainer.fails("produce", orders, "--stdin", stdin='{"key": "k"}\n', fix='"value"')
    orders_in = [
        {"key": "alice", "value": {"id": 1, "amount": 5}},
        {"key": "alice", "value": {"id": 2, "amount": -1}},  # the handler fails on it
        {"key": "alice", "value": {"id": 3, "amount": 7}},  # waits behind it (ordering: key)
        {"key": "bob", "value": {"id": 4, "amount": 2}},
    ]
    lines = "".join(json.dumps(o) + "\n" for o in orders_in)
    drainer.ok("produce", orders, "--level", "1", "--stdin", stdin=lines)
    drainer.ok("produce", lake, "--level", "1", "--count", "30", "--keys", "3")

    lake_run = drainer.ok("run", lake)
    assert "30 records in" in lake_run.stdout and "30 sink rows published" in lake_run.stdout

    # the handler's failure is the record's, not the run's: every run exits 0, and the failing
    # record is retried, then dead-lettered at max_attempts: 2; id 3 waits behind it (key)
    results = []
    for _ in range(5):
        results.append(json.loads(drainer.ok("run", orders, "--json").stdout))
        if results[-1]["drained"] == 0:
            break
    level_1 = [lv for r in results for lv in r["levels"] if lv["level"] == 1]
    assert results[-1]["drained"] == 0 and sum(r["drained"] for r in results) == 4
    assert [lv["failed"] for lv in level_1][:2] == [1, 1], level_1
    assert sum(lv["dead_lettered"] for lv in level_1) == 1
    with get_engine().connect() as conn:
        stored = conn.execute(text(f"SELECT id, amount FROM {orders} ORDER BY id")).all()
    assert [(r.id, r.amount) for r in stored] == [("1", 5.0), ("3", 7.0), ("4", 2.0)]
    status = drainer.ok("status", orders)
    assert orders in status.stdout

    [dead] = json.loads(drainer.ok("dlq", "list", orders, "--json").stdout)
    assert "negative amount -1" in dead["error"], dead
    drainer.fails("dlq", "retry", orders, "--ids", str(dead["id"] + 1000), fix="dlq list")
    drainer.ok("dlq", "retry", orders, "--ids", str(dead["id"]))
    drainer.fails("dlq", "retry", orders, "--ids", str(dead["id"]), fix="dlq list")
    drainer.fails("rewind", orders, "--level", "1", "--to-earliest", fix="--reason")
