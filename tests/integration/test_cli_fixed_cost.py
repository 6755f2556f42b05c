"""What `drainer plan` and an empty `drainer run` cost as whole processes, in counts (issue 51):
the modules they import, the Postgres connections they open, the Kafka clients and requests
they make. Counts, not timings: a busy machine changes the seconds, never these.

Each command runs as `drainer` does (`spark_jobs.cli.entry`), in a child process whose
wrapper counts what the real clients do (SQLAlchemy's pool `connect` event, the admin
client's calls, which still go to the broker) and prints the counts when the process ends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from drainer.kafka.producer import OutRecord
from tests.support.stack import produce_records

# counts what the child's clients do, then runs the `drainer` console script's own entry
_COUNTING = """
import atexit, collections, json, sys
import confluent_kafka, confluent_kafka.admin as admin
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.pool import Pool

counts = collections.Counter()
statements = collections.Counter()
event.listen(Pool, "connect", lambda *_: counts.update(["postgres connections"]))

def executed(conn, cursor, statement, *_):  # an executemany is one statement, pipelined
    statements[" ".join(statement.split()[:4])] += 1
event.listen(Engine, "before_cursor_execute", executed)
for name in ("__init__", "describe_topics", "list_topics", "list_offsets",
             "list_consumer_group_offsets", "alter_consumer_group_offsets", "create_topics"):
    def counted(self, *args, _call=getattr(admin.AdminClient, name), _name=name, **kwargs):
        counts["admin " + _name] += 1
        return _call(self, *args, **kwargs)
    setattr(admin.AdminClient, name, counted)
for kind in ("Consumer", "Producer"):
    def made(*args, _kind=getattr(confluent_kafka, kind), _name=kind, **kwargs):
        counts[_name.lower() + "s"] += 1
        return _kind(*args, **kwargs)
    setattr(confluent_kafka, kind, made)

def report():
    modules = sorted(sys.modules)
    found = {"counts": counts, "modules": modules, "statements": statements}
    print("COUNTS " + json.dumps(found), file=sys.stderr)
atexit.register(report)
sys.argv = ["drainer", *sys.argv[1:]]
from spark_jobs.cli import entry
entry()
"""


def counted(*args: str) -> tuple[dict[str, int], set[str], str]:
    """`drainer <args>` in a child process: (counts, modules imported, stdout)."""
    found, out = _child(*args)
    return found["counts"], set(found["modules"]), out


def _child(*args: str) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-c", _COUNTING, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("COUNTS "))
    return json.loads(line.removeprefix("COUNTS ")), done.stdout


# the local stack (starting services), the Spark side and the sinks: none is a planner's business
NOT_FOR_PLAN = ("pyspark", "dagster", "drainer.services", "drainer.spark", "drainer.sinks")


def test_plan_imports_no_spark_no_local_stack_and_asks_kafka_once(make_drain):
    drain = make_drain()
    counts, modules, out = counted("plan", drain.name, "--json")
    assert json.loads(out)["total_planned"] == 0
    assert not [m for m in modules if m.startswith(NOT_FOR_PLAN)]
    assert "spark_jobs.drain_job" not in modules
    # one admin client: the level topics described in one request, their offsets in one
    # batch per isolation level (earliest, latest, last stable); one Postgres connection
    assert counts == {
        "admin __init__": 1,
        "admin describe_topics": 1,
        "admin list_offsets": 3,
        "postgres connections": 1,
    }


def test_empty_run_imports_no_spark_and_asks_kafka_twice(make_drain):
    drain = make_drain()
    counted("run", drain.name, "--json")  # the first run records the topics' ids
    counts, modules, out = counted("run", drain.name, "--json")
    assert json.loads(out)["drained"] == 0
    assert not [m for m in modules if m.startswith(("pyspark", "dagster"))]
    assert "spark_jobs.drain_job" not in modules
    # the plan's offsets and the backlog after the run: two batches of three ListOffsets, the
    # topics described once; two Postgres connections: the lease's (its session lock, held
    # for the whole run) and the pool's one for every other statement
    assert counts == {
        "admin __init__": 1,
        "admin describe_topics": 1,
        "admin list_offsets": 6,
        "postgres connections": 2,
    }


def test_a_run_of_many_partitions_writes_their_offsets_in_one_statement_each(make_drain):
    """The first progress of every partition and each partition's mirrored offset: one
    executemany each, not a statement (a round trip) per partition."""
    drain = make_drain(levels=3, partitions=8)
    for level in range(3):
        for partition in range(8):
            records = [OutRecord(b"v%d" % i, b"k") for i in range(2)]
            produce_records(drain, records, level=level, partition=partition)
    found, out = _child("run", drain.name, "--json")
    assert json.loads(out)["drained"] == 48
    statements = found["statements"]
    assert statements["INSERT INTO partition_offsets (drain,"] == 1
    assert statements["UPDATE partition_offsets SET mirrored_offset"] == 1
