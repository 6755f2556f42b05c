"""drainer/ imports neither dagster nor pyspark (DESIGN §2): the CLI and tools stay light."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import drainer


def test_drainer_imports_neither_dagster_nor_pyspark():
    modules = [
        f"drainer.{m.name}" for m in pkgutil.walk_packages([str(Path(drainer.__file__).parent)])
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'pyspark')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert len(modules) > 15
