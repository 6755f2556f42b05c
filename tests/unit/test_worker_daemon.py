"""drainer's Python worker daemon preloads what its tasks import; a module that fails to
import is left to the task that needs it, which reports it where the run shows errors."""

from __future__ import annotations

import gc
import subprocess
import sys

from spark_jobs.worker_daemon import PRELOADED, preload


def test_preload_imports_the_modules_and_leaves_failures_to_the_tasks(capsys):
    try:
        failed = preload(("json", "drainer_no_such_module"))
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()  # this process is a test run, not a daemon about to fork
    assert failed == ["drainer_no_such_module"]
    assert "json" in sys.modules
    assert frozen > 0
    assert "drainer_no_such_module not preloaded" in capsys.readouterr().err


def test_every_preloaded_module_imports():
    code = (
        "from spark_jobs.worker_daemon import preload; import sys; sys.exit(1 if preload() else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert PRELOADED
