"""Before and after: one backlog drained by two checkouts in turn (issue 47's no-regression check).

A restructuring must not cost speed. This drains the same backlog with an older checkout
(`--before`, e.g. a `git worktree` of the commit before the change, its own `.venv`) and this one
(`--after`), as whole `drainer run` processes, alternating which goes first in each round, so
that a drifting machine load falls on both alike.

- Each side has its own warm Connect server (`--before-port`, `--after-port`) whose Python
  workers import that side's code, and its own fresh database (`<db>_before`, `<db>_after`: a
  run's planning reads history, so both start from none).
- Per round and path, a fresh drain (own name, consumer group and table or topic) reads the
  backlog's topics from the start: `postgres`, `delta`, `iceberg` with
  `spark_jobs.examples:one_row_per_record`; `kafka` (the server producer) and `kafka_driver`
  with `kafka_passthrough`. A warm-up round runs first and is not counted.
- Every output is read back (`readback.py`) and must hold each source record once.
- Each run also records the CPU seconds its `drainer run` process and its side's Connect server
  spent (`cpu_probe.py`): a gap in wall time with none in CPU is waiting or the machine's load,
  not more work (the server's count includes its JIT and GC: compare warm rounds).
- The verdict per path is on the paired ratios, after / before within each round: a
  regression beyond noise only when the interval that holds their median (the sign test's,
  `fair.median_interval`) lies wholly above 1. `--pool` gives it over several sittings' results.

```bash
git worktree add --detach ../before f2ece29 && make -C ../before .venv/.installed
.venv/bin/python benchmarks/before_after.py --before ../before --records 1000000 --repeat 5
.venv/bin/python benchmarks/before_after.py --pool benchmarks/results/before_after-1000000{,-????}.json
```
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import cpu_probe
import fair
import readback
import yaml
from common import OUT, REPO, fresh_drain, produce

from drainer.services.connect import ConnectPaths
from drainer.settings import load_settings, psycopg_url

PATHS = ("postgres", "delta", "iceberg", "kafka", "kafka_driver")
ROW_PROCESSOR = "spark_jobs.examples:one_row_per_record"
PASSTHROUGH = "spark_jobs.examples:kafka_passthrough"
FOLDER = "bench_before_after"  # under the warehouse: the Delta tables


class Side:
    """One checkout: its `drainer` command, Connect port, database and drains file."""

    def __init__(self, label: str, checkout: Path, port: int, database_url: str) -> None:
        self.label, self.checkout, self.port = label, checkout.resolve(), port
        self.database_url = database_url
        self.drains_file = OUT / f"before_after_{label}.yaml"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        return env | {
            "DRAINER_DATABASE_URL": self.database_url,
            "DRAINER_CONNECT_PORT": str(self.port),
            "DRAINER_CONFIG": str(self.drains_file),
        }

    def server_cpu(self) -> float | None:
        """CPU seconds this side's local Connect server has used so far (None: not ours)."""
        settings = dataclasses.replace(load_settings(), connect_port=self.port)
        pid = cpu_probe.server_pid(ConnectPaths.local(settings).pid_file)
        return cpu_probe.process_cpu(pid)

    def drainer(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.checkout / ".venv" / "bin" / "drainer"), *args],
            env=self.env,
            cwd=self.checkout,
            capture_output=True,
            text=True,
        )


def fresh_database(name: str) -> str:
    """A new empty database `name` on the benchmark's server; its SQLAlchemy URL."""
    import psycopg
    from psycopg import sql

    url = load_settings().database_url
    with psycopg.connect(psycopg_url(url), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return url.rsplit("/", 1)[0] + "/" + name


def sink_of(path: str, name: str, out_topic: str | None) -> dict[str, Any]:
    if path == "postgres":
        return {"type": "postgres", "table": f"{name}_out"}
    if path == "delta":
        return {"type": "delta", "path": f"{FOLDER}/{name}"}
    if path == "iceberg":
        return {"type": "iceberg", "table": f"bench.{name}"}
    producer = "driver" if path == "kafka_driver" else "server"
    return {"type": "kafka", "topic": out_topic, "producer": producer}


def plan_drains(source: Any, records: int, rounds: int, paths: list[str], side: Side) -> dict:
    """Every drain this side runs, in one drains file (its Connect server gets every jar at
    once): `{(round, path): (name, sink)}`."""
    from kafka_sink import create_topic

    drains, body = {}, {}
    for round_ in range(rounds):
        for path in paths:
            name = f"ba_{side.label[:3]}_{path[:5]}_{round_}_{uuid.uuid4().hex[:6]}"
            out = create_topic() if path.startswith("kafka") else None
            sink = sink_of(path, name, out)
            drains[(round_, path)] = (name, sink)
            body[name] = {
                "topic": source.topic,
                "group": name,
                "levels": source.levels,
                "partitions": source.partitions,
                "budget": records,
                "schedule": None,
                "processor": PASSTHROUGH if path.startswith("kafka") else ROW_PROCESSOR,
                "sink": sink,
            }
    side.drains_file.write_text(yaml.safe_dump({"drains": body}))
    return drains


def read_back(side: Side, sink: dict[str, Any], expected: fair.Expected, label: str) -> None:
    """The output, read by a reader that is not drainer's, against the source's offsets (a
    table in the side's own database)."""
    if sink["type"] == "kafka":
        found = readback.kafka(sink["topic"], expected)
    elif sink["type"] == "delta":
        found = readback.delta(str(Path(load_settings().warehouse) / sink["path"]))
    elif sink["type"] == "iceberg":
        found = readback.iceberg(sink["table"], side.database_url)
    else:
        found = readback.postgres(sink["table"], side.database_url)
    expected.check(label, found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="the older checkout")
    parser.add_argument("--after", type=Path, default=REPO, help="default: this checkout")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--before-port", type=int, default=15021)
    parser.add_argument("--after-port", type=int, default=15020)
    parser.add_argument(
        "--read-back",
        choices=("all", "first"),
        default="all",
        help="`first`: read back only each path's first counted round (at 10M a Kafka read-back "
        "takes longer than the run; the later rounds are the same drain on the same backlog)",
    )
    parser.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        help="run nothing: the verdict per path over the paired rounds of these results files "
        "together (several sittings: a narrower interval than one sitting's five rounds)",
    )
    args = parser.parse_args()
    if args.pool:
        pooled(args.pool)
        return
    if args.before is None:
        parser.error("--before is required (or --pool)")

    database = f"bench_ba_{uuid.uuid4().hex[:6]}"
    sides = {
        "before": Side("before", args.before, args.before_port, fresh_database(database + "_b")),
        "after": Side("after", args.after, args.after_port, fresh_database(database + "_a")),
    }
    source = fresh_drain(args.records, name=f"bench_ba_{uuid.uuid4().hex[:8]}")
    produce(source, args.records)
    expected = fair.Expected.of_drain(source)
    rounds = args.repeat + 1  # round 0 warms each side's server and is not counted
    drains = {
        label: plan_drains(source, args.records, rounds, args.paths, side)
        for label, side in sides.items()
    }
    for side in sides.values():
        up = side.drainer("services", "up")
        if up.returncode != 0:
            raise SystemExit(f"{side.label}: services up failed: {up.stderr.strip()[-500:]}")

    runs: list[dict[str, Any]] = []
    for round_ in range(rounds):
        for path in args.paths:
            order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
            for label in order:
                side = sides[label]
                name, sink = drains[label][(round_, path)]
                client_cpu, server_cpu = cpu_probe.children_cpu(), side.server_cpu()
                started = time.perf_counter()
                done = side.drainer("run", name, "--json")
                wall = time.perf_counter() - started
                cpu = {
                    "client_cpu_s": cpu_probe.spent(client_cpu, cpu_probe.children_cpu()),
                    "server_cpu_s": cpu_probe.spent(server_cpu, side.server_cpu()),
                }
                if done.returncode != 0:
                    raise SystemExit(f"{label} {path}: drainer run failed: {done.stderr[-800:]}")
                # the run's own phases (plan, Spark job, commit, ...): where a difference lies
                phases = json.loads(done.stdout[done.stdout.index("{") :]).get("phases", {})
                if args.read_back == "all" or round_ == 1:
                    read_back(side, sink, expected, f"{label} {path} round {round_}")
                runs.append(
                    {
                        "side": label,
                        "path": path,
                        "round": round_,
                        "wall_s": wall,
                        **cpu,
                        "phases": phases,
                    }
                )
                checked = "read back ok" if args.read_back == "all" or round_ == 1 else "exit 0"
                print(f"round {round_} {path:13} {label:6} {wall:7.2f} s  {checked}", flush=True)

    rows = summarize(runs, args.paths)
    fair.write_results(
        "before_after",
        {
            "records": args.records,
            "repeat": args.repeat,
            "before": {"checkout": str(sides["before"].checkout), "commit": head(args.before)},
            "after": {"checkout": str(sides["after"].checkout), "commit": head(args.after)},
            "rows": rows,
            "runs": runs,
        },
    )


def summarize(runs: list[dict[str, Any]], paths: list[str]) -> list[dict[str, Any]]:
    """Per path: each side's median and spread over the counted rounds, and after / before."""
    rows = []
    print(f"\n{'path':13} {'before (s)':>22} {'after (s)':>22} {'after/before':>13}")
    for path in paths:
        walls = {
            label: sorted(
                r["wall_s"]
                for r in runs
                if r["path"] == path and r["side"] == label and r["round"] > 0
            )
            for label in ("before", "after")
        }
        med = {label: fair.median(w) for label, w in walls.items()}
        ratio = med["after"] / med["before"]
        cells = {k: f"{med[k]:.2f} [{w[0]:.2f}-{w[-1]:.2f}]" for k, w in walls.items()}
        print(f"{path:13} {cells['before']:>22} {cells['after']:>22} {ratio:12.2f}x")
        paired = paired_ratios(runs, path)
        verdict = fair.noise_verdict(paired)
        print(f"  paired after/before by round: {', '.join(f'{r:.2f}' for r in paired)}")
        print(f"  {verdict}")
        for label in ("before", "after"):  # each side's phases, medians over the same rounds
            counted = [r for r in runs if r["path"] == path and r["side"] == label and r["round"]]
            names = sorted({p for r in counted for p in r.get("phases", {})})
            medians = {p: fair.median([r["phases"].get(p, 0.0) for r in counted]) for p in names}
            print(f"  {label:6} " + ", ".join(f"{p} {s:.2f}" for p, s in medians.items() if s))
        cpu = {label: cpu_medians(runs, path, label) for label in ("before", "after")}
        for label, medians in cpu.items():  # work, not waiting: CPU seconds per run
            print(f"  {label:6} cpu " + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()))
        rows.append(
            {
                "path": path,
                "before_s": walls["before"],
                "after_s": walls["after"],
                "median_before_s": med["before"],
                "median_after_s": med["after"],
                "after_over_before": ratio,
                "paired_after_over_before": paired,
                "verdict": verdict,
                "median_cpu_s": cpu,
            }
        )
    return rows


def paired_ratios(runs: list[dict[str, Any]], path: str) -> list[float]:
    """after / before of `path` in each counted round, in round order: the two sides of one
    round ran back to back, so a drifting load falls on both and cancels in the ratio."""
    wall = {(r["side"], r["round"]): r["wall_s"] for r in runs if r["path"] == path}
    rounds = sorted(
        {r for side, r in wall if r > 0 and ("before", r) in wall and ("after", r) in wall}
    )
    return [wall[("after", r)] / wall[("before", r)] for r in rounds]


def pooled(files: list[Path]) -> None:
    """Per path, the verdict over every counted round of `files` (results of this script)."""
    ratios: dict[str, list[float]] = {}
    for file in files:
        runs = json.loads(file.read_text())["runs"]
        for path in dict.fromkeys(r["path"] for r in runs):
            ratios.setdefault(path, []).extend(paired_ratios(runs, path))
    print(f"{len(files)} sittings pooled: " + ", ".join(str(f) for f in files))
    for path, paired in ratios.items():
        print(f"{path:13} {len(paired):3} rounds  {fair.noise_verdict(paired)}")


def cpu_medians(runs: list[dict[str, Any]], path: str, label: str) -> dict[str, float]:
    """One side's median CPU seconds per counted run of `path`: `client` (its `drainer run`)
    and `server` (its Connect server), each where known."""
    counted = [r for r in runs if r["path"] == path and r["side"] == label and r["round"]]
    medians = {}
    for key in ("client", "server"):
        known = [r[f"{key}_cpu_s"] for r in counted if r.get(f"{key}_cpu_s") is not None]
        if known:
            medians[key] = fair.median(known)
    return medians


def head(checkout: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True
    )
    return done.stdout.strip()


if __name__ == "__main__":
    main()
