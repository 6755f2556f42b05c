"""How long one fold of a sink's partitions takes, by tier and rows per run.

  .venv/bin/python benchmarks/fold_tiers.py               # --tiers 3 4 --rows 1000
  .venv/bin/python benchmarks/fold_tiers.py --listed      # an earlier version's LIST target

A tier-k fold copies 8**k runs of rows (drainer.sinks.postgres_folds): it happens in the upkeep
after a run's commit, under the drain's lease, once every 8**k runs. For each tier and rows per
run, a fresh target shaped like `one_row_per_record`'s (topic, partition, offset, level, key,
value_size, the run id; one index on the offset, carried over by the fold as a user's would be)
is given the eight tier-(k-1) range partitions that fold, and `fold_sink` folds them into one:
exactly the fold upkeep does at that run. With `--listed` the target is LIST-partitioned as
earlier versions made it, its `--parts` partitions listing their run ids (`--parts 4096
--tiers 4`: one per run, as the earliest versions left them), and the fold is the one that moves
them all into `<table>_runs`.

Reported per case: the rows copied, the sources' size (indexes included), the fold's seconds
(median of `--repeat`; with `--listed` all folds, LIST folds first), rows and MB a second, and
`swap_s`: from the end of the (last) fold's copy to its commit, the time readers of the target
wait. Tables are dropped after each case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid

from common import OUT


def build(table: str, tier: int, rows_per_run: int, listed: bool, parts: int) -> int:
    """The target with its 8**tier runs in `parts` partitions; returns the rows it holds."""
    from sqlalchemy import text

    from drainer.sinks.postgres_folds import FANOUT
    from drainer.store.sink_names import literal
    from drainer.store.sink_partitions import fold_comment
    from tests.support.stack import get_engine

    per_part = FANOUT**tier // parts
    strategy = "LIST" if listed else "RANGE"
    with get_engine().begin() as conn:
        conn.execute(
            text(
                f'CREATE TABLE "{table}" (topic text, partition integer, "offset" bigint, '
                "level integer, key text, value_size integer, _drainer_run_id bigint NOT NULL) "
                f"PARTITION BY {strategy} (_drainer_run_id)"
            )
        )
        conn.execute(text(f'CREATE INDEX ON "{table}" ("offset")'))
        for k in range(parts):
            first = k * per_part + 1
            ids = ", ".join(str(i) for i in range(first, first + per_part))
            name = f"{table}_p{k}"
            conn.execute(text(f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING ALL)'))
            conn.execute(
                text(
                    f'INSERT INTO "{name}" SELECT :topic, g % 4, g, 0, '
                    "'key-' || (g % 1000), 100, r "
                    f"FROM generate_series({first}, {first + per_part - 1}) r, "
                    "LATERAL generate_series((r - 1) * CAST(:n AS bigint), "
                    "r * CAST(:n AS bigint) - 1) g"
                ),
                {"topic": f"{table}-0", "n": rows_per_run},
            )
            bound = f"IN ({ids})" if listed else f"FROM ({first}) TO ({first + per_part})"
            conn.execute(
                text(f'ALTER TABLE "{table}" ATTACH PARTITION "{name}" FOR VALUES {bound}')
            )
            if not listed:
                comment = literal(fold_comment(table, per_part))
                conn.execute(text(f'COMMENT ON TABLE "{name}" IS {comment}'))
        conn.execute(text(f'ANALYZE "{table}"'))
        return int(conn.scalar(text(f'SELECT count(*) FROM "{table}"')))


def drop(table: str) -> None:
    """Drop the target, its partitions first in batches: one transaction cannot lock 4,096."""
    from sqlalchemy import text

    from tests.support.stack import get_engine

    while True:
        with get_engine().begin() as conn:
            names = (
                conn.execute(
                    text(
                        "SELECT relname FROM pg_class WHERE relname LIKE :p AND relkind = 'r' LIMIT 500"
                    ),
                    {"p": f"{table}\\_%"},
                )
                .scalars()
                .all()
            )
            for name in names:
                conn.execute(text(f'DROP TABLE "{name}"'))
        if not names:
            break
    with get_engine().begin() as conn:
        conn.execute(text(f'DROP TABLE IF EXISTS "{table}" CASCADE'))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--listed", action="store_true", help="an earlier version's LIST target")
    parser.add_argument(
        "--parts", type=int, default=8, help="partitions the runs are in (8: one tier below)"
    )
    args = parser.parse_args()

    from sqlalchemy.exc import OperationalError

    from drainer.sinks.postgres_folds import fold_sink
    from drainer.store import sink_partitions
    from tests.support.stack import get_engine

    cases = []
    for rows_per_run in args.rows:
        for tier in args.tiers:
            seconds: list[float] = []
            swaps: list[float] = []
            folds: list[int] = []
            error = None
            for _ in range(args.repeat):
                table = f"foldbench_{uuid.uuid4().hex[:8]}"
                try:
                    t0 = time.perf_counter()
                    rows = build(table, tier, rows_per_run, args.listed, args.parts)
                    built = time.perf_counter() - t0
                    load = os.getloadavg()[0]
                    with get_engine().connect() as conn:
                        size = sum(p.bytes for p in sink_partitions.partitions(conn, table))
                    copied: list[float] = []

                    def mark(point: str, copied: list[float] = copied) -> None:
                        if point == "fold_copied":
                            copied.append(time.perf_counter())

                    t0 = time.perf_counter()
                    try:
                        report = fold_sink(get_engine(), table, checkpoint=mark)
                    except OperationalError as err:  # e.g. a bound too big for pg_class
                        error = str(err.orig).splitlines()[0]
                        seconds.append(time.perf_counter() - t0)
                        print(f"tier {tier}: the fold failed: {error}", file=sys.stderr)
                    else:
                        seconds.append(time.perf_counter() - t0)
                        swaps.append(time.perf_counter() - copied[-1])  # the last fold's
                        folds.append(report.folds)
                        assert report.after == 1 and (args.listed or report.folds == 1), report
                finally:
                    drop(table)
                print(
                    f"tier {tier}, {rows_per_run} rows/run: {rows} rows built in {built:.0f} s, "
                    f"folded in {seconds[-1]:.1f} s (load {load:.1f})",
                    file=sys.stderr,
                )
            fold_s = statistics.median(seconds)
            cases.append(
                {
                    "tier": tier,
                    "listed": args.listed,
                    "parts": args.parts,
                    "runs": 8**tier,
                    "rows_per_run": rows_per_run,
                    "rows": rows,
                    "source_mb": round(size / 2**20, 1),
                    "error": error,
                    "fold_s": round(fold_s, 2),
                    "all_s": [round(s, 2) for s in seconds],
                    "rows_per_s": round(rows / fold_s),
                    "mb_per_s": round(size / 2**20 / fold_s, 1),
                    "swap_s": round(statistics.median(swaps), 3) if swaps else None,
                    "folds": folds[-1] if folds else None,
                }
            )
    report = {"cases": cases, "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
    OUT.mkdir(exist_ok=True)
    name = "fold_tiers_listed.json" if args.listed else "fold_tiers.json"
    (OUT / name).write_text(json.dumps(report, indent=2))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
