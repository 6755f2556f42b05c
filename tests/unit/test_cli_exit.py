"""The `drainer` process ends through `exit_process`: its code, its atexit handlers and its
output as `sys.exit` would give them, without the interpreter's last collections."""

from __future__ import annotations

import subprocess
import sys


def _exit_with(code: int) -> subprocess.CompletedProcess[str]:
    script = (
        "import atexit, sys\n"
        "from drainer.cli import exit_process\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "sys.stdout.write('buffered, not flushed')\n"
        f"exit_process({code})\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)


def test_the_exit_code_output_and_atexit_handlers_survive():
    for code in (0, 2, 3):
        done = _exit_with(code)
        assert done.returncode == code, done.stderr
        assert done.stdout == "buffered, not flushedatexit ran\n"


def test_the_console_script_ends_through_it():
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "drainer"]
    assert script.value == "spark_jobs.cli:entry"
    done = subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "usage: drainer" in done.stdout, done.stderr
