"""Where a state table's MERGE runs (issue 48): a session kept on the Connect server from run to
run (`kept`, as drainer runs since `9bcbd95`) against a clone of the run's session made for each
MERGE (`clone`, as every run did before).

  .venv/bin/python benchmarks/merge_session.py   # --records 1000000 --keys 100000 --rounds 7

upserts.py's records into a Delta table already holding every key, drainer writing the peer's
columns (`upserts.run_drainer(lean=True)`); the two ways alternate within each round, each a
drainer run of its own, timed whole and read back, with the local Connect server's CPU seconds
over the run (`cpu_probe`: every thread of it, the JIT's among them). A first round warms and is
not counted. Printed: each way's medians and the kept run's time over the clone's, round by
round (`fair.paired`). The server compiles each session's query code apart (its class loader
keys Spark's cache of compiled classes): a clone per MERGE compiled its ~58 classes every run.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
from collections.abc import Iterator
from typing import Any

import cpu_probe
import fair
import upserts
from common import fresh_drain

from drainer.services.connect import ConnectPaths
from drainer.settings import load_settings
from spark_jobs import own_session
from spark_jobs.sinks import delta_upsert

WAYS = ("kept", "clone")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    way = {"now": "kept"}
    kept = own_session.own_settings

    @contextlib.contextmanager
    def own_settings(spark: Any, keep_for: str | None = None) -> Iterator[Any]:
        with kept(spark, keep_for if way["now"] == "kept" else None) as own:
            yield own

    delta_upsert.own_settings = own_settings  # the MERGE looks it up at each run
    pid = cpu_probe.server_pid(ConnectPaths.local(load_settings()).pid_file)
    server_cpu = {"now": None}
    filled = upserts.filled

    def filled_then_measured(*a: Any, **k: Any) -> None:  # the table is made before the clock
        filled(*a, **k)
        server_cpu["now"] = cpu_probe.process_cpu(pid)

    upserts.filled = filled_then_measured
    source = fresh_drain(args.records, levels=upserts.LEVELS, partitions=upserts.PARTITIONS)
    newest = upserts.produce_versions(source, args.records, args.keys)
    walls: dict[str, list[float]] = {w: [] for w in WAYS}
    cpus: dict[str, list[float]] = {w: [] for w in WAYS}
    for round_ in range(args.rounds + 1):
        for name in WAYS if round_ % 2 == 0 else reversed(WAYS):
            way["now"] = name
            wall, where = upserts.run_drainer(
                source, args.records, "delta", "upsert", args.keys, lean=True
            )
            cpu = cpu_probe.spent(server_cpu["now"], cpu_probe.process_cpu(pid))
            upserts.check(name, upserts.read_back("delta", where, True), newest, 0)
            shutil.rmtree(where, ignore_errors=True)
            counted = "warm-up" if round_ == 0 else "read back"
            print(f"round {round_}: {name} {wall:.2f} s, server {cpu} s CPU, {counted}")
            if round_:
                walls[name].append(wall)
                if cpu is not None:
                    cpus[name].append(cpu)
    from tests.support.drains import delete_topics

    delete_topics(source)
    found = fair.paired(walls, "kept", "clone")
    assert found is not None
    medians = ", ".join(
        f"{w} {statistics.median(walls[w]):.2f} s"
        + (f" (server CPU {statistics.median(cpus[w]):.2f} s)" if cpus[w] else "")
        for w in WAYS
    )
    print(f"{args.records:,} records over {args.keys:,} keys, medians: {medians}")
    print(f"kept / clone, round by round: {found['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
