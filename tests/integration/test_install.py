"""An installed (non-editable) drainer works from any directory: migrations ship as package data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_installed_package_finds_its_migrations_from_another_directory(make_drain, tmp_path):
    drain = make_drain(levels=2, budget=10)
    wheels, target, elsewhere = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(ROOT)], check=True)
    (wheel,) = wheels.glob("drainer-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    assert (target / "drainer" / "store" / "migrations" / "001_init.sql").exists()

    # the installed copy only: the checkout is not on the path, and the cwd is elsewhere
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONSAFEPATH": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", "import drainer.store.engine as e; print(e.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.startswith(str(target))
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "status", drain.name, "--json"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [lv["level"] for lv in json.loads(done.stdout)["levels"]] == [1, 0]
