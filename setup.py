"""Ships the top-level `sql/` migrations inside the wheel as `drainer/sql/` (all else is in pyproject).

setuptools maps package data only from inside a package's folder, and the migrations live at the
top level beside the code (the project's agreed layout), so one build step copies them in. An
editable install needs no copy: `drainer.store.engine.migrations_dir` reads the checkout's `sql/`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SQL = Path(__file__).resolve().parent / "sql"


class BuildWithMigrations(build_py):
    """build_py, plus the numbered migrations copied into the built `drainer` package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "drainer" / "sql"
        target.mkdir(parents=True, exist_ok=True)
        for migration in sorted(SQL.glob("*.sql")):
            shutil.copyfile(migration, target / migration.name)


setup(cmdclass={"build_py": BuildWithMigrations})
