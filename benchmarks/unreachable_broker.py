"""How long `drainer plan` takes to say that the broker is unreachable, and how much it says.

    .venv/bin/python benchmarks/unreachable_broker.py [--repeat 5]

Runs the CLI against KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1 (nothing listens there) with a
one-drain file, and reports the wall time of the whole process (interpreter start and imports
included), the time spent before the first contact with Kafka gives up (the process's own
import time, measured with `--help`, subtracted), and the number of stderr lines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support

from tests.support.drains import drain_body  # noqa: E402

CLI = [sys.executable, "-m", "spark_jobs.cli"]


def timed(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, env=env)
    return time.monotonic() - started, done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "drains.yaml"
        config.write_text(yaml.safe_dump({"drains": {"bench": drain_body("bench")}}))
        env = {
            **os.environ,
            "DRAINER_CONFIG": str(config),
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "COLUMNS": "1000",
        }
        walls, lines, starts = [], [], []
        for _ in range(repeat):
            starts.append(timed(["--help"], env)[0])
            wall, done = timed(["plan", "bench"], env)
            assert done.returncode == 2, done.stderr
            walls.append(wall)
            lines.append(len([x for x in done.stderr.splitlines() if x.strip()]))
    print(f"runs: {repeat}; stderr lines: {sorted(set(lines))}")
    print(
        f"wall time of `drainer plan`: median {statistics.median(walls):.2f} s, max {max(walls):.2f} s"
    )
    print(
        f"of which interpreter start + imports (`--help`): median {statistics.median(starts):.2f} s"
    )
    print(f"message: {done.stderr.strip()}")


if __name__ == "__main__":
    main()
