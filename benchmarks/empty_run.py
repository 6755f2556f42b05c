"""What a run with nothing to drain costs, as a whole `drainer run` process, and where it goes.

    .venv/bin/python benchmarks/empty_run.py [--repeat 7] [--code LABEL=DIR ...]

A fresh drain (3 levels x 4 partitions, empty topics) is run once to warm up (its first run
records topic ids and creates its offsets), then `drainer run <drain> --json` is timed `--repeat`
times as a subprocess, each a fresh interpreter. Reported, medians over the repetitions:

- **process**: the subprocess's wall time, launch to exit;
- **interpreter**: `python -c pass`;
- **start + CLI imports**: `drainer --help` (the interpreter, the CLI's imports, the parser);
- **run**: the run's `duration_s` (after the lease: plan, Spark, commit, mirror) and its
  `phases` from `--json`;
- **rest**: process - start + CLI imports - run: the run command's own imports, loading the drains
  file, the executor's set-up, the lease, the engine, printing;
- **plan** and **status**: `drainer plan <drain> --json` and `drainer status <drain>` as whole
  processes (issue 30: the commands that read no records import no Spark, no Dagster).

`--code LABEL=DIR` runs the CLI from a checkout (its directory on PYTHONPATH), e.g. the code
before a change: `git archive <commit> | tar -x -C /tmp/before`, then
`--code before=/tmp/before --code after=.`; the repetitions alternate between the checkouts, so a
machine that gets busier weighs on both alike. The drain is created by this checkout's code; all
read the same drains file. Each checkout's bytecode is compiled first (`compileall`), as any Python
that may write it has it after one run (PYTHONDONTWRITEBYTECODE, set on this machine, would
otherwise make every process compile drainer from source: ~70 ms). Raw numbers go to
`benchmarks/out/empty_run.json`.
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


def measure(cli: list[str], run: list[str], env: dict[str, str], code: Path) -> dict[str, float]:
    """One repetition: the interpreter alone, the CLI's start, `plan` and `status`, then the run
    as a whole."""
    interpreter, _ = timed([sys.executable, "-c", "pass"], env, code)
    start, _ = timed([*cli, "--help"], env, code)
    drain = run[run.index("run") + 1]
    plan, _ = timed([*cli, "plan", drain, "--json"], env, code)
    status, _ = timed([*cli, "status", drain], env, code)
    wall, out = timed(run, env, code)
    result = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert result["drained"] == 0, result
    sample = {
        "process": wall,
        "interpreter": interpreter,
        "start_and_cli_imports": start,
        "plan": plan,
        "status": status,
        "run": result["duration_s"],
        **{f"phase_{name}": result["phases"].get(name, 0.0) for name in PHASES},
    }
    sample["rest"] = wall - start - result["duration_s"]
    return sample


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--code",
        action="append",
        metavar="LABEL=DIR",
        help="a checkout to time (repeatable: repetitions alternate between them, so a busy "
        "machine weighs on each alike); default: this one, as `current`",
    )
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    codes = dict(
        (label, Path(path).resolve())
        for label, path in (item.split("=", 1) for item in args.code or [f"current={here}"])
    )
    drain = fresh_drain(0, levels=3, partitions=4)
    cli = [sys.executable, "-m", "spark_jobs.cli"]
    run = [*cli, "run", drain.name, "--json"]
    envs = {label: {**os.environ, "PYTHONPATH": str(code)} for label, code in codes.items()}
    for code in codes.values():  # as a Python that may write bytecode has it after one run
        packages = [str(code / name) for name in ("drainer", "spark_jobs")]
        subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True)
    for label, code in codes.items():  # warm-up: the first run creates offsets and topic ids
        timed(run, envs[label], code)
    samples: dict[str, list[dict[str, float]]] = {label: [] for label in codes}
    for _ in range(args.repeat):
        for label, code in codes.items():
            samples[label].append(measure(cli, run, envs[label], code))
    OUT.mkdir(exist_ok=True)
    report = {}
    for label, code in codes.items():
        keys = samples[label][0]
        medians = {key: statistics.median(s[key] for s in samples[label]) for key in keys}
        report[label] = {"code": str(code), "samples": samples[label], "medians": medians}
        print(f"{label} ({code}), {args.repeat} runs of `drainer run {drain.name}`, medians:")
        for key, value in medians.items():
            low = min(s[key] for s in samples[label])
            high = max(s[key] for s in samples[label])
            print(f"  {key:<24} {value:6.3f} s  ({low:.3f}-{high:.3f})")
    (OUT / "empty_run.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
