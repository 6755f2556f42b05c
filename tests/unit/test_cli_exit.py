"""The `drainer` process ends through `exit_process`: its code, its atexit handlers and its
output as `sys.exit` would give them, without the interpreter's last collections. It starts
with the collector held off through its imports (`pause_collection`), back on, frozen, once
they are done."""

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


def _python(script: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_command_other_than_run_gets_the_collector_back_once_parsed():
    script = (
        "import gc\n"
        "from drainer.cli import main, pause_collection\n"
        "frozen = gc.get_freeze_count()\n"  # a site hook may have frozen some (3.12)
        "pause_collection()\n"
        "print(gc.isenabled())\n"
        "main(['simulate', 'no-such-drain'])\n"  # fails on its config: the collector is back
        "print(gc.isenabled(), gc.get_freeze_count() > frozen)\n"
    )
    assert _python(script) == ["False", "True", "True"]


def test_plan_and_status_hold_it_off_to_their_end():
    script = (
        "import gc\n"
        "from drainer.cli import main, pause_collection\n"
        "pause_collection()\n"
        "main(['status', 'no-such-drain'])\n"
        "main(['plan', 'no-such-drain'])\n"
        "print(gc.isenabled())\n"
    )
    assert _python(script) == ["False"]


def test_run_gets_it_back_once_its_spark_session_is_up():
    script = (
        "import gc\n"
        "import spark_jobs.drain_job as job\n"
        "job.which_spark = lambda settings: 'a session'\n"
        "job.execute = lambda ctx: gc.isenabled()\n"
        "from drainer.cli import main, pause_collection\n"
        "from spark_jobs.cli import spark_executor\n"
        "pause_collection()\n"
        "main(['run', 'no-such-drain'])\n"  # fails before its executor: still paused
        "print(gc.isenabled())\n"
        "from types import SimpleNamespace\n"
        "print(spark_executor()(SimpleNamespace(settings=None)))\n"  # the job: collector on
    )
    assert _python(script) == ["False", "True"]


def test_resuming_a_collector_it_did_not_pause_changes_nothing():
    script = (
        "import gc\n"
        "from drainer.cli import pause_collection, resume_collection\n"
        "frozen = gc.get_freeze_count()\n"
        "resume_collection()\n"
        "print(gc.isenabled(), gc.get_freeze_count() == frozen)\n"
        "gc.disable()\n"
        "pause_collection(); resume_collection()\n"  # a caller's own choice is kept
        "print(gc.isenabled(), gc.get_freeze_count() == frozen)\n"
    )
    assert _python(script) == ["True", "True", "False", "True"]


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    """Before: an ~80-line KeyboardInterrupt traceback. The run's own interrupt is proven in
    tests/integration/test_newcomer_path.py; here, which line each case gets."""
    import argparse

    from drainer.cli.main import INTERRUPTED, interrupted, main

    assert INTERRUPTED == 130
    run = argparse.Namespace(command="run", drain="orders")
    assert interrupted(run, KeyboardInterrupt()) == (
        "interrupted; nothing committed; `drainer run orders` resumes the plan"
    )
    late = KeyboardInterrupt()
    late.committed_run = 7  # type: ignore[attr-defined]
    assert "after run 7 of orders committed" in interrupted(run, late)
    assert interrupted(argparse.Namespace(command="status"), KeyboardInterrupt()) == "interrupted"

    def ctrl_c(_argv: object = None) -> object:
        raise KeyboardInterrupt

    import drainer.cli.status as status

    monkeypatch.setattr(status, "cmd_status", ctrl_c)
    code = main(["status", "orders"])
    err = capsys.readouterr().err
    assert code == 130 and err.strip() == "drainer: interrupted", err
