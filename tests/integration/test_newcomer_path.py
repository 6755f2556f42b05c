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
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from drainer.config import load_drains
from drainer.services.process import with_default_signals
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
    # on this shell's PYTHONPATH: the module travels with the session to the server's workers,
    # which were started without it; another PYTHONPATH is no reason to restart the server
    drainer.env["PYTHONPATH"] = str(folder)
    up = drainer.ok("services", "up")
    assert "restarting" not in up.stdout, up.stdout
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


def _drains_file(folder: Path, drains: dict) -> None:
    (folder / "drains.yaml").write_text(yaml.safe_dump({"drains": drains}))


def _run_status(name: str) -> list[tuple[int, str, str | None]]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text("SELECT id, status, error FROM runs WHERE drain = :d ORDER BY id"), {"d": name}
        ).all()
    return [(r.id, r.status, r.error) for r in rows]


def test_ctrl_c_during_a_run_is_one_line_exit_130_and_the_next_run_resumes(tmp_path, stack):
    """Before: an ~80-line KeyboardInterrupt traceback from pyspark/grpc, and `drainer status`
    said `KeyboardInterrupt:` with nothing after. SIGINT is sent once the run's Spark job is
    under way (its handler takes a second per record, in offset order): the race happened when
    the interrupted run is stored failed with nothing committed, and the next run resumes it."""
    name = f"ctrlc_{uuid.uuid4().hex[:8]}"
    body = {
        "topic": name,
        "group": name,
        "levels": 1,
        "partitions": 1,
        "budget": 100,
        "schedule": None,
        "mode": "record",
        "handler": "spark_jobs.examples:sleepy_echo",
        "output_schema": "topic string, partition int, offset long, level int, key string, "
        "value_size int",
        "sink": {"type": "postgres", "table": f"{name}_out"},
    }
    _drains_file(tmp_path, {name: body})
    drainer = Newcomer(tmp_path)
    try:
        drainer.ok("topics", "create", name)
        drainer.ok("produce", name, "--count", "12")
        # SIGINT at its default, as a terminal starts commands: a suite started in the
        # background (`make test &`) ignores it, and a child inherits that, so the run would
        # sit the signal out and exit 0
        run = subprocess.Popen(
            with_default_signals([*DRAINER, "run", name]),
            cwd=tmp_path,
            env=drainer.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        waited = 0
        while not any(status == "running" for _, status, _ in _run_status(name)):
            assert run.poll() is None and waited < 600, run.communicate()
            time.sleep(0.5)
            waited += 1
        time.sleep(4)  # into the Spark job: 12 records, a second each
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=120)
        # the message whole, not a repr pytest shortens: its middle says where the SIGINT went
        assert run.returncode == 130, f"exit {run.returncode}; stderr ends:\n{err[-4000:]}"
        assert "Traceback" not in err, err
        error = err[err.index("drainer: ") :]
        assert len([line for line in error.splitlines() if line.strip()]) <= 3, error
        assert f"interrupted; nothing committed; `drainer run {name}` resumes the plan" in error

        [(run_id, status, reason)] = _run_status(name)
        assert status == "failed" and reason is not None
        assert reason.startswith("interrupted (Ctrl-C) before the commit"), reason
        shown = drainer.ok("status", name).stdout
        assert "interrupted (Ctrl-C)" in shown and "KeyboardInterrupt" not in shown

        resumed = json.loads(drainer.ok("run", name, "--json").stdout)
        assert (resumed["run_id"], resumed["resumed"], resumed["drained"]) == (run_id, True, 12)
        with get_engine().connect() as conn:
            offsets = conn.execute(text(f'SELECT "offset" FROM {name}_out ORDER BY 1')).scalars()
            assert list(offsets) == list(range(12))  # each record once
    finally:
        for drain in load_drains(tmp_path / "drains.yaml").values():
            delete_topics(drain)


def test_produce_sends_what_it_is_asked_to_and_names_the_line_it_refuses(tmp_path, stack):
    """Before: a value that is not JSON, on a drain that declares JSON values, was a 23-31
    line JSONDecodeError traceback (also with `--format string`), and `"value": null` went out
    as the four bytes `null`."""
    from kafka_output import read_output

    name = f"prod_{uuid.uuid4().hex[:8]}"
    body = {
        "topic": name,
        "group": name,
        "levels": 1,
        "partitions": 1,
        "budget": 100,
        "schedule": None,
        "value": {"format": "json", "schema": "id bigint"},
        "sink": {"type": "postgres", "table": f"{name}_out"},
    }
    _drains_file(tmp_path, {name: body})
    drainer = Newcomer(tmp_path)
    try:
        drainer.ok("topics", "create", name)
        lines = '{"value": {"id": 1}}\n{"key": "k", "value": "not json"}\n'
        drainer.fails("produce", name, "--stdin", stdin=lines, fix="stdin line 2")
        drainer.fails("produce", name, "--stdin", stdin=lines, fix="--format string")
        assert read_output(f"{name}-0") == []  # nothing sent: every line is checked first

        drainer.ok("produce", name, "--stdin", "--format", "string", stdin=lines)
        drainer.ok("produce", name, "--stdin", "--format", "bytes", stdin='{"value": "raw"}\n')
        drainer.ok("produce", name, "--stdin", stdin='{"key": "k", "value": null}\n')
        values = [record.value for record in read_output(f"{name}-0")]
        assert values == [b'{"id": 1}', b"not json", b"raw", None]  # the last a tombstone
    finally:
        for drain in load_drains(tmp_path / "drains.yaml").values():
            delete_topics(drain)


def test_a_misspelt_key_is_named_with_the_key_meant(tmp_path):
    """Before: `tabel` was reported as a missing `table`, `typ: delta` made a postgres sink,
    and a misspelt key beside its correct sibling got pydantic's bare "Extra inputs are not
    permitted"."""
    drainer = Newcomer(tmp_path)
    body = {"topic": "keys", "group": "keys", "levels": 2, "budget": 100, "schedule": None}
    for sink, fix in (
        ({"tabel": "out"}, "unknown key `tabel` in sink; did you mean `table`?"),
        ({"table": "out", "tabel": "x"}, "unknown key `tabel` in sink; did you mean `table`?"),
        ({"typ": "delta", "path": "lake/keys"}, "set `type: delta`"),
    ):
        _drains_file(tmp_path, {"keys": {**body, "sink": sink}})
        drainer.fails("plan", "keys", fix=fix)


def test_a_dead_letter_is_shown_whole_and_fixed_before_its_retry(tmp_path, stack):
    """Before: `dlq list` never showed the payload, and `dlq retry` re-sent the same bytes, so
    an undecodable record came straight back as a new dead letter."""
    name = f"dead_{uuid.uuid4().hex[:8]}"
    body = {
        "topic": name,
        "group": name,
        "levels": 1,
        "partitions": 1,
        "budget": 100,
        "schedule": None,
        "value": {"format": "json", "schema": "id bigint"},
        "bad_records": "dead_letter",
        "sink": {"type": "postgres", "table": f"{name}_out"},
    }
    _drains_file(tmp_path, {name: body})
    drainer = Newcomer(tmp_path)
    try:
        drainer.ok("topics", "create", name)
        lines = '{"value": {"id": 1}}\n{"value": "{\\"id\\": \\"abc\\"}"}\n'
        drainer.ok("produce", name, "--stdin", stdin=lines)
        drainer.ok("run", name)
        [dead] = json.loads(drainer.ok("dlq", "list", name, "--json").stdout)
        assert dead["value"] == '{"id": "abc"}' and dead["value_base64"], dead
        assert "id = abc is not bigint" in dead["error"], dead
        listed = drainer.ok("dlq", "list", name).stdout
        assert '{ "id": "abc" }' in listed, listed  # the payload, on the table's line
        shown = drainer.ok("dlq", "show", name, str(dead["id"])).stdout
        assert "reason: undecodable: the value's JSON does not fit its schema" in shown, shown
        assert '"id": "abc"' in shown, shown

        # the same bytes would come straight back: refused, naming the way to fix them
        ident = str(dead["id"])
        drainer.fails("dlq", "retry", name, "--ids", ident, fix="--value-from FILE")
        drainer.fails("dlq", "show", name, str(dead["id"] + 1000), fix="dlq list")
        (tmp_path / "fixed.json").write_text('{"id": 2}')
        drainer.ok("dlq", "retry", name, "--ids", ident, "--value-from", "fixed.json")
        drainer.ok("run", name)
        with get_engine().connect() as conn:
            ids = conn.execute(text(f"SELECT id FROM {name}_out ORDER BY id")).scalars().all()
        assert ids == [1, 2]
        assert json.loads(drainer.ok("dlq", "list", name, "--json").stdout) == []
    finally:
        for drain in load_drains(tmp_path / "drains.yaml").values():
            delete_topics(drain)


def test_services_up_from_another_drains_file_never_restarts_the_server_under_a_run(
    tmp_path, stack
):
    """Before: a second user's `services up` restarted the shared Connect server in the middle
    of another user's run ("Cannot call methods on a stopped SparkContext"). A run writes (a
    second a record); another folder's `services up` that needs no restart leaves the server
    be (another PYTHONPATH: its modules travel with its sessions), one that needs it (table
    formats the server lacks: a client cannot add jars) refuses naming the run, and with
    `--wait` restarts it only once the run is done: the run commits."""
    from drainer.services import connect
    from drainer.services.connect import ConnectPaths
    from drainer.services.connect_users import current_users
    from drainer.settings import load_settings

    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    name = f"shared_{uuid.uuid4().hex[:8]}"
    body = {
        "topic": name,
        "group": name,
        "levels": 1,
        "partitions": 1,
        "budget": 100,
        "schedule": None,
        "mode": "record",
        "handler": "spark_jobs.examples:sleepy_echo",
        "output_schema": "topic string, partition int, offset long, level int, key string, "
        "value_size int",
        "sink": {"type": "postgres", "table": f"{name}_out"},
    }
    _drains_file(mine, {name: body})
    other = {**body, "topic": f"{name}_x", "group": f"{name}_x", "mode": "dataframe"}
    del other["handler"], other["output_schema"]
    other["sink"] = {"type": "postgres", "table": f"{name}_x"}
    _drains_file(theirs, {f"{name}_x": other})
    lake = {
        f"{name}_d": {**other, "sink": {"type": "delta", "path": f"{name}_d"}},
        f"{name}_i": {**other, "sink": {"type": "iceberg", "table": f"drains.{name}_i"}},
    }
    me, them = Newcomer(mine), Newcomer(theirs)
    settings = load_settings()
    server = ConnectPaths.local(settings).root
    run = None
    try:
        # only the Connect server (never Kafka or Postgres): started again below without the
        # table formats' jars, which the other folder's drains then need
        connect.stop(settings, echo=lambda _: None)
        me.ok("services", "up")  # the server as this folder needs it: no run yet
        me.ok("topics", "create", name)
        me.ok("produce", name, "--count", "10")
        run = subprocess.Popen(
            [*DRAINER, "run", name, "--json"],
            cwd=mine,
            env=me.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        waited = 0
        while not any(f"of drain {name}" in user for user in current_users(server)):
            assert run.poll() is None and waited < 1200, run.communicate()
            time.sleep(0.5)
            waited += 1

        them.env["PYTHONPATH"] = str(theirs)  # their own modules: shipped, no restart
        same = them.ok("services", "up")
        assert "restarting" not in same.stdout, same.stdout
        _drains_file(theirs, lake)  # formats whose jars the server lacks: it must restart
        refused = them.fails("services", "up", fix=f"of drain {name}")
        assert "--wait SECONDS" in refused and "lacks the jars of delta, iceberg" in refused
        assert run.poll() is None  # still running: nothing restarted under it

        waited_up = them.ok("services", "up", "--wait", "600")
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        assert json.loads(out)["drained"] == 10
        assert "restarting" in waited_up.stdout, waited_up.stdout
        assert [status for _, status, _ in _run_status(name)] == ["committed"]
    finally:
        if run is not None and run.poll() is None:
            run.kill()
        for folder in (mine, theirs):
            for drain in load_drains(folder / "drains.yaml").values():
                delete_topics(drain)


def test_topics_create_makes_the_kafka_sinks_output_topic_and_plain_ones(tmp_path, stack):
    """Before: the Kafka sink's missing-topic error sent the user to `kafka-topics.sh`, which
    the local stack does not ship, and `drainer topics create` could not make an output topic."""
    name = f"out_{uuid.uuid4().hex[:8]}"
    body = {
        "topic": name,
        "group": name,
        "levels": 2,
        "partitions": 1,
        "budget": 100,
        "schedule": None,
        "sink": {"type": "kafka", "topic": f"{name}_out"},
    }
    _drains_file(tmp_path, {name: body})
    drainer = Newcomer(tmp_path)
    try:
        made = drainer.ok("topics", "create", name, "--topic", f"{name}_routed").stdout
        states = {line.split()[0]: line.split()[1] for line in made.splitlines() if line.strip()}
        topics = (f"{name}-0", f"{name}-1", f"{name}_out", f"{name}_routed")
        assert states == dict.fromkeys(topics, "created"), made
        again = drainer.ok("topics", "create", name).stdout
        states = {line.split()[0]: line.split()[1] for line in again.splitlines() if line.strip()}
        assert states == dict.fromkeys(topics[:3], "exists"), again
    finally:
        from kafka_output import admin, delete_topic

        for topic in (f"{name}_out", f"{name}_routed"):
            delete_topic(admin(), topic)
        for drain in load_drains(tmp_path / "drains.yaml").values():
            delete_topics(drain)
