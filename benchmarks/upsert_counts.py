"""How a Delta state table's counts are taken, and what it costs (issue 48): a run without
deletes into a table holding every key, its counts from its MERGE commit's metrics plus the
markers it revives (`metered`, as drainer runs) against the join of its rows with the whole
table before the MERGE (`joined`, as every run counted until `f9ae5f5`).

  .venv/bin/python benchmarks/upsert_counts.py   # --records 1000000 --keys 100000 --rounds 7

upserts.py's records and tables (`--into existing`; `--table-keys`: the table holds that many
keys, the run's among them, as a state table many runs have filled); the two ways alternate
within each round, each a drainer run of its own, timed whole and read back (the run's keys at
their newest version, every other key as the table held it). Printed: each way's median and the
metered run's time over the joined one's, round by round (`fair.paired`).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from typing import Any

import fair
import upserts
from common import fresh_drain

from spark_jobs.sinks import upsert as spark_upsert

WAYS = ("metered", "joined")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--table-keys", type=int, default=0, help="default: --keys")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    way = {"now": "metered"}
    counted = spark_upsert.count_changes

    def count_changes(source: Any, table: Any, spec: Any, unordered=False, metered=False):
        return counted(source, table, spec, unordered, metered and way["now"] == "metered")

    spark_upsert.count_changes = count_changes  # read_once looks it up at each call
    source = fresh_drain(args.records, levels=upserts.LEVELS, partitions=upserts.PARTITIONS)
    newest = upserts.produce_versions(source, args.records, args.keys)
    held = max(args.table_keys, args.keys)
    walls: dict[str, list[float]] = {w: [] for w in WAYS}
    for round_ in range(args.rounds):
        for name in WAYS if round_ % 2 == 0 else reversed(WAYS):
            way["now"] = name
            wall, where = upserts.run_drainer(source, args.records, "delta", "upsert", held)
            rows = upserts.read_back("delta", where, True)
            upserts.check(name, [r for r in rows if r["id"] in newest], newest, 0)
            assert len(rows) == held, f"{name}: {len(rows)} live rows, {held} keys held"
            shutil.rmtree(where, ignore_errors=True)
            walls[name].append(wall)
            print(f"round {round_}: {name} {wall:.2f} s, read back", file=sys.stderr)
    from tests.support.drains import delete_topics

    delete_topics(source)
    found = fair.paired(walls, "metered", "joined")
    assert found is not None
    medians = ", ".join(f"{w} {statistics.median(walls[w]):.2f} s" for w in WAYS)
    print(f"{args.records:,} records over {args.keys:,} of {held:,} keys, medians: {medians}")
    print(f"metered / joined, round by round: {found['verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
