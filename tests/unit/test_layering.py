"""The layers stay where docs/design.md puts them, enforced rather than remembered.

- `drainer/` imports neither dagster nor pyspark: the CLI and tools stay light.
- The pure modules (allocation, offset map, record processing, level health) do no I/O: no database or Kafka
  client among their imports.
- SQL text lives in `drainer/store/` only.
- Environment variables are read in `drainer/settings.py` only.
"""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import drainer

ROOT = Path(drainer.__file__).resolve().parent.parent
CODE_DIRS = ("drainer", "spark_jobs", "dagster_project")
PURE = (
    "drainer.allocation",
    "drainer.offset_map",
    "drainer.processing.record_processing",
    "drainer.observe.health",
)
IO_CLIENTS = ("sqlalchemy", "psycopg", "confluent_kafka", "dagster", "pyspark")
SQL = re.compile(
    r"^\s*(SELECT\s+(\d|\w+\(|.*\bFROM\b)|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM"
    r"|COPY\s+\S+\s*\(|CREATE\s+(TABLE|INDEX|ROLE|DATABASE)|WITH\s+\w+\s+AS\s*\()",
    re.IGNORECASE | re.DOTALL,
)


def _imported_after(modules: list[str]) -> list[str]:
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return eval(done.stdout)  # a printed list of names


def _python_files() -> list[Path]:
    return [p for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]


def test_drainer_imports_neither_dagster_nor_pyspark():
    modules = [
        m.name
        for m in pkgutil.walk_packages(drainer.__path__, "drainer.")
        if not m.name.endswith("__main__")
    ]
    assert {"drainer.store.runs", "drainer.cli.runs", "drainer.services.kafka"} <= set(modules)
    loaded = _imported_after(modules)
    assert "dagster" not in loaded and "pyspark" not in loaded


def test_pure_modules_import_no_io_client():
    loaded = _imported_after(list(PURE))
    assert not set(IO_CLIENTS) & set(loaded), set(IO_CLIENTS) & set(loaded)


def test_sql_text_lives_only_in_the_store():
    offenders = []
    for path in _python_files():
        if "drainer/store/" in path.as_posix():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and SQL.match(node.value)
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == [], f"SQL outside drainer/store/: {offenders}"


def test_store_really_holds_the_sql():
    """The check above would pass vacuously if the pattern never matched."""
    store = ROOT / "drainer" / "store" / "runs.py"
    strings = [
        n.value
        for n in ast.walk(ast.parse(store.read_text()))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]
    assert any(SQL.match(s) for s in strings)


def test_environment_is_read_only_in_settings():
    reads = re.compile(r"os\.environ\.(get|setdefault)\(|os\.getenv\(|os\.environ\[")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _python_files()
        if path.name != "settings.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if reads.search(line)
    ]
    assert offenders == [], f"environment read outside drainer/settings.py: {offenders}"


def test_code_cites_no_document_outside_the_repository():
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _python_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bDESIGN( §|\.md)", line)
    ]
    assert offenders == [], f"point at docs/ instead: {offenders}"
