"""What the package ships and how its code gets its settings, enforced rather than remembered.

- Settings are built once at an edge (the CLI, `settings.py` itself, the `drainer` entry point,
  the Dagster resource, an Airflow hook) and handed down: no `load_settings()` below them.
- The package ships the product, not the tests' fixtures: every function of
  `spark_jobs/examples.py` is one the docs, the README or the demo's drains file name, and no
  module of the package imports `tests`.
- Comments and docstrings say why, not which CI run saw it.

Each check is a function over source text, and each has a self-test that feeds it an offender.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import drainer

ROOT = Path(drainer.__file__).resolve().parent.parent
CODE_DIRS = ("drainer", "spark_jobs", "dagster_project")

# where settings are built from the environment (or an orchestrator's connections)
SETTINGS_EDGES = (
    "drainer.cli",
    "drainer.settings",
    "spark_jobs.cli",
    "dagster_project.resources",
    "drainer.airflow.hook",
    "drainer.airflow.hooks",
)
SETTINGS_BUILDERS = ("load_settings", "settings_with")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_files() -> list[Path]:
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))


# --- settings handed down -------------------------------------------------------------------


def _at_an_edge(module: str) -> bool:
    return any(module == edge or module.startswith(edge + ".") for edge in SETTINGS_EDGES)


def settings_built_below_the_edges(module: str, source: str) -> list[str]:
    """`module:line` of each call that builds settings from the environment outside an edge."""
    if _at_an_edge(module):
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in SETTINGS_BUILDERS:
                found.append(f"{module}:{node.lineno} {name}()")
    return found


def test_settings_are_built_only_at_the_edges():
    found = [
        hit
        for path in _package_files()
        for hit in settings_built_below_the_edges(_module_name(path), path.read_text())
    ]
    assert found == [], "pass the caller's Settings down instead: " + ", ".join(found)


def test_the_settings_check_catches_a_fallback_below_the_edges():
    fallback = (
        "from drainer.settings import load_settings\n"
        "def total(settings=None):\n"
        "    settings = settings or load_settings()\n"
    )
    assert settings_built_below_the_edges("drainer.observe.checks", fallback) == [
        "drainer.observe.checks:3 load_settings()"
    ]
    assert settings_built_below_the_edges("drainer.lifecycle.run", "s = settings_with({})\n")
    assert settings_built_below_the_edges("drainer.cli.maintain", fallback) == []
    assert settings_built_below_the_edges("dagster_project.resources", fallback) == []


# --- the product, not the fixtures ----------------------------------------------------------

EXAMPLES = ROOT / "spark_jobs" / "examples.py"
_NAMED = re.compile(r"spark_jobs\.examples:(\w+)")


def _documentation() -> str:
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return "\n".join(p.read_text() for p in [*docs, ROOT / "README.md", ROOT / "drains.yaml"])


def fixtures_in_examples(source: str, documentation: str) -> list[str]:
    """Public functions of the examples module that no document names as
    `spark_jobs.examples:<name>`: a test's fixture shipped in the wheel."""
    named = set(_NAMED.findall(documentation))
    functions = [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    ]
    return [name for name in functions if name not in named]


def test_the_examples_module_holds_only_documented_examples():
    found = fixtures_in_examples(EXAMPLES.read_text(), _documentation())
    assert found == [], f"move {found} to tests/processors.py, or document them"


def test_the_examples_check_catches_a_test_only_processor():
    source = "def time_buckets(df):\n    ...\ndef kafka_one_oversized(df):\n    ...\n"
    docs = "processor: spark_jobs.examples:time_buckets\n"
    assert fixtures_in_examples(source, docs) == ["kafka_one_oversized"]


def imports_of_tests(module: str, source: str) -> list[str]:
    """`module:line` of each import of the tests' modules (tests, tests.*)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found += [
            f"{module}:{node.lineno} {name}"
            for name in names
            if name == "tests" or name.startswith("tests.")
        ]
    return found


def test_the_package_imports_nothing_of_the_tests():
    found = [
        hit
        for path in _package_files()
        for hit in imports_of_tests(_module_name(path), path.read_text())
    ]
    assert found == []
    assert not (ROOT / "drainer" / "testing.py").exists(), "test helpers live in tests/support/"


def test_the_tests_import_check_catches_an_import():
    source = "import os\nfrom tests.support.drains import drain_body\nimport tests.processors\n"
    assert imports_of_tests("drainer.x", source) == [
        "drainer.x:2 tests.support.drains",
        "drainer.x:3 tests.processors",
    ]


# --- comments that say why ------------------------------------------------------------------

CI_CITATION = re.compile(
    r"\bCI ?#?\d+\b|\bCI (?:saw|caught|failed|found|hit)\b|\ba CI run\b|\b(?:seen|saw it) (?:on|in) CI\b"
)
COMMENTED_DIRS = (*CODE_DIRS, "tests", "scripts", "benchmarks")


def ci_citations(name: str, source: str) -> list[str]:
    """`name:line` of each comment or docstring of Python `source` that cites a run of CI."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and CI_CITATION.search(token.string):
            found.append(f"{name}:{token.start[0]}")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and CI_CITATION.search(doc):
                found.append(f"{name}:{node.body[0].lineno}")
    return sorted(set(found))


def makefile_ci_citations(text: str) -> list[str]:
    return [
        f"Makefile:{n}"
        for n, line in enumerate(text.splitlines(), 1)
        if "#" in line and CI_CITATION.search(line[line.index("#") :])
    ]


def test_no_comment_cites_a_ci_run():
    files = sorted(p for d in COMMENTED_DIRS for p in (ROOT / d).rglob("*.py"))
    found = [hit for p in files for hit in ci_citations(str(p.relative_to(ROOT)), p.read_text())]
    found += makefile_ci_citations((ROOT / "Makefile").read_text())
    assert found == [], f"say why, not which CI run saw it: {found}"


def test_the_ci_check_catches_a_citation():
    source = (
        '"""Races two attempts (CI23 saw it)."""\n'
        "x = 1  # retried: CI44 saw it\n"
        "def f():\n"
        '    """Waits for the page; a CI run failed without it."""\n'
        "y = 2  # the tests CI runs, on every interpreter\n"
    )
    assert ci_citations("m.py", source) == ["m.py:1", "m.py:2", "m.py:4"]
    makefile = "unit:\n\t@# CI 12 saw it\n# the unit tests (CI runs this)\n"
    assert makefile_ci_citations(makefile) == ["Makefile:2"]
