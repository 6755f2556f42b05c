"""What a run with nothing to drain costs, as a whole `drainer run` process, and where it goes.

    .venv/bin/python benchmarks/empty_run.py [--repeat 7] [--code DIR] [--label NAME]

A fresh drain (3 levels x 4 partitions, empty topics) is run once to warm up (its first run
records topic ids and creates its offsets), then `drainer run <drain> --json` is timed `--repeat`
times as a subprocess, each a fresh interpreter. Reported, medians over the repetitions:

- **process**: the subprocess's wall time, launch to exit;
- **interpreter**: `python -c pass`;
- **start + CLI imports**: `drainer --help` (the interpreter, the CLI's imports, the parser);
- **run**: the run's `duration_s` (after the lease: plan, Spark, commit, mirror) and its
  `phases` from `--json`;
- **rest**: process - start + CLI imports - run: the run command's own imports, loading the drains
  file, the executor's set-up, the lease, the engine, printing.

`--code DIR` runs the CLI from another checkout (its directory on PYTHONPATH), e.g. the code
before a change: `git archive <commit> | tar -x -C /tmp/before`. The drain is created by this
checkout's code; both read the same drains file. Raw numbers go to
`benchmarks/out/empty_run_<label>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import OUT, fresh_drain  # noqa: E402

PHASES = ("plan", "spark_start", "spark_job", "commit", "mirror")


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--label", default="current")
    args = parser.parse_args()
    code = args.code.resolve()
    drain = fresh_drain(0, levels=3, partitions=4)
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "COLUMNS": "1000",
    }
    cli = [sys.executable, "-m", "spark_jobs.cli"]
    run = [*cli, "run", drain.name, "--json"]
    timed(run, env, code)  # warm-up: the drain's first run creates its offsets and topic ids
    samples: list[dict[str, float]] = []
    for _ in range(args.repeat):
        interpreter, _ = timed([sys.executable, "-c", "pass"], env, code)
        start, _ = timed([*cli, "--help"], env, code)
        wall, out = timed(run, env, code)
        result = json.loads(out[out.index("{") : out.rindex("}") + 1])
        assert result["drained"] == 0, result
        sample = {
            "process": wall,
            "interpreter": interpreter,
            "start_and_cli_imports": start,
            "run": result["duration_s"],
            **{f"phase_{name}": result["phases"].get(name, 0.0) for name in PHASES},
        }
        sample["rest"] = wall - start - result["duration_s"]
        samples.append(sample)
    medians = {key: statistics.median(s[key] for s in samples) for key in samples[0]}
    OUT.mkdir(exist_ok=True)
    path = OUT / f"empty_run_{args.label}.json"
    path.write_text(
        json.dumps({"code": str(code), "samples": samples, "medians": medians}, indent=2)
    )
    print(f"{args.label} ({code}), {args.repeat} runs of `drainer run {drain.name}`, medians:")
    for key, value in medians.items():
        low = min(s[key] for s in samples)
        high = max(s[key] for s in samples)
        print(f"  {key:<24} {value:6.3f} s  ({low:.3f}-{high:.3f})")


if __name__ == "__main__":
    main()
