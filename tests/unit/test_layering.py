"""The layers stay where docs/design.md puts them, enforced rather than remembered.

- `drainer/` imports neither dagster nor pyspark: the CLI and tools stay light. The one
  exception is `drainer.dagster`, the `dg` component's public name: the top layer, above
  `dagster_project` whose factory it wraps, so nothing else in `drainer/` may import it.
- Only `drainer/airflow/` imports airflow (the Airflow provider: DAGs, operators, hook), and it
  is a top layer too: nothing else of ours imports it.
- The pure modules (allocation, offset map, record processing, level health) do no I/O: no database or Kafka
  client among their imports.
- SQL text lives in `drainer/store/` only.
- Environment variables are read in `drainer/settings.py` only.
- No module imports a layer above its own (`LAYERS`, lowest first), counting imports inside
  functions too; `drainer/store/` imports only settings, errors, level_topics, offset_map and itself.
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
    "drainer.observe.health_rules",
)
IO_CLIENTS = ("sqlalchemy", "psycopg", "confluent_kafka", "dagster", "pyspark")
# lowest first; a module may import its own layer and the ones below. The longest matching
# prefix names a module's layer ("drainer" alone is the package root: its version, no code).
LAYERS: list[tuple[str, ...]] = [
    (
        "drainer",
        "drainer.settings",
        "drainer.local_secrets",
        "drainer.errors",
        "drainer.faults",
        "drainer.error_text",
        "drainer.level_topics",
        "drainer.read_counts",
    ),
    ("drainer.offset_map", "drainer.processing", "drainer.allocation"),
    ("drainer.store",),
    ("drainer.config",),
    # Kafka as a source and an admin, and building a jar: what the sinks may use
    ("drainer.kafka", "drainer.spark.javac", "drainer.spark.lock", "drainer.spark.tools"),
    ("drainer.sinks",),
    ("drainer.spark",),
    ("drainer.services", "drainer.records"),
    ("drainer.lifecycle", "drainer.observe"),
    ("drainer.cli",),
    ("spark_jobs",),
    ("dagster_project",),
    # the `dg` component (drainer.dagster.DrainsComponent): YAML onto dagster_project's factory
    ("drainer.dagster",),
    # the Airflow provider: the drains file as DAGs, operators calling spark_jobs' run
    ("drainer.airflow",),
]
# the one package of ours that may import airflow
AIRFLOW_PACKAGE = "drainer.airflow"
# the modules of drainer/ that import dagster: the component's, at the top of LAYERS
DAGSTER_MODULES = ("drainer.dagster",)
STORE_MAY_IMPORT = (
    "drainer.settings",
    "drainer.local_secrets",
    "drainer.errors",
    "drainer.level_topics",
    "drainer.offset_map",
    "drainer.store",
)
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


def test_drainer_imports_neither_dagster_nor_pyspark_nor_airflow():
    modules = [
        m.name
        for m in pkgutil.walk_packages(drainer.__path__, "drainer.")
        if not m.name.endswith("__main__")
        and m.name not in DAGSTER_MODULES
        and not m.name.startswith(AIRFLOW_PACKAGE + ".")
    ]
    assert {"drainer.store.runs", "drainer.cli.runs", "drainer.airflow"} <= set(modules)
    loaded = _imported_after(modules)
    assert "dagster" not in loaded and "pyspark" not in loaded and "airflow" not in loaded


def _airflow_imports(module: str, source: str) -> list[str]:
    """`module:line imports name` for each airflow import of a module outside drainer/airflow
    (its own package's `__init__` included: Airflow loads it for `get_provider_info` while it
    reads its own configuration, so it must not import airflow either)."""
    inside = module.startswith(AIRFLOW_PACKAGE + ".")
    return [
        f"{module}:{line} imports {name}"
        for line, name in _imports(module, source)
        if not inside and (name == "airflow" or name.startswith("airflow."))
    ]


def test_only_drainer_airflow_imports_airflow():
    offenders = [
        offender
        for path in _python_files()
        for offender in _airflow_imports(_module_name(path), path.read_text())
    ]
    assert offenders == [], "airflow outside drainer/airflow/: " + "; ".join(offenders)


def test_the_airflow_check_catches_an_airflow_import():
    """The check above would pass vacuously if it never found one."""
    hidden = "def f():\n    from airflow.sdk import DAG\n    return DAG\n"
    assert _airflow_imports("drainer.lifecycle.fake", hidden) == [
        "drainer.lifecycle.fake:2 imports airflow.sdk.DAG"
    ]
    assert _airflow_imports("dagster_project.fake", "import airflow\n")
    assert _airflow_imports("drainer.airflow", "from airflow.sdk import BaseHook\n")
    assert _airflow_imports("drainer.airflow.hook", "from airflow.sdk import BaseHook\n") == []
    # and nothing of ours reaches the provider's package from below
    assert _upward_imports("drainer.cli.fake", "from drainer.airflow import drain_dags\n")
    assert _upward_imports("spark_jobs.fake", "import drainer.airflow.operators\n")
    assert _upward_imports("drainer.airflow.operators", "from spark_jobs import drain_job\n") == []


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


def _layer(module: str) -> int | None:
    """The layer of a module of ours (None: not ours), by the longest matching prefix."""
    found = [
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(prefix + ".")
    ]
    return max(found)[1] if found else None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(module: str, source: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, name) of everything `source` imports, anywhere in it (functions included).

    `from a.b import c` counts as `a.b.c`, so `from drainer import faults` is `drainer.faults`.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing module's package
                package = module.split(".")
                package = package[: len(package) - node.level + (1 if is_package else 0)]
                base = ".".join(package + ([base] if base else []))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _upward_imports(module: str, source: str, is_package: bool = False) -> list[str]:
    own = _layer(module)
    assert own is not None, f"{module} has no layer: add it to LAYERS"
    return [
        f"{module}:{line} imports {name}"
        for line, name in _imports(module, source, is_package)
        if (_layer(name) or 0) > own
    ]


def test_no_module_imports_a_layer_above_its_own():
    offenders = [
        offender
        for path in _python_files()
        for offender in _upward_imports(
            _module_name(path), path.read_text(), path.name == "__init__.py"
        )
    ]
    assert offenders == [], "upward imports (see LAYERS): " + "; ".join(offenders)


def test_the_layer_check_catches_an_upward_import():
    """The check above would pass vacuously if it never found one."""
    hidden = "def f():\n    from drainer.config import DrainConfig\n    return DrainConfig\n"
    assert _upward_imports("drainer.store.fake", hidden) == [
        "drainer.store.fake:2 imports drainer.config.DrainConfig"
    ]
    assert _upward_imports("drainer.kafka.fake", "import drainer.lifecycle.run\n")
    assert _upward_imports("drainer.allocation.fake", "from drainer import store\n")
    assert _upward_imports("spark_jobs.fake", "import dagster_project\n")
    assert _upward_imports("drainer.store.fake", "from ..lifecycle import run\n")
    # downward, sideways and third-party imports are fine
    assert _upward_imports("drainer.store.fake", "from drainer.store import runs\n") == []
    assert _upward_imports("drainer.observe.fake", "from drainer.lifecycle import planning\n") == []
    assert _upward_imports("dagster_project.fake", "import dagster\nimport spark_jobs\n") == []
    # the component's module is the top layer: drainer's own modules cannot reach it
    assert _upward_imports("drainer.cli.fake", "from drainer.dagster import DrainsComponent\n")
    assert _upward_imports("dagster_project.fake", "import drainer.dagster\n")
    assert _upward_imports("drainer.dagster", "from dagster_project import factory\n") == []


def test_every_module_has_a_layer():
    unplaced = [_module_name(p) for p in _python_files() if _layer(_module_name(p)) is None]
    assert unplaced == []


def test_the_store_imports_only_the_bottom_layer():
    """All SQL, plain values in and out: the store knows no configuration, plan or client."""
    offenders = [
        f"{_module_name(path)}:{line} imports {name}"
        for path in sorted((ROOT / "drainer" / "store").rglob("*.py"))
        for line, name in _imports(_module_name(path), path.read_text(), path.name == "__init__.py")
        if _layer(name) is not None
        and not any(name == ok or name.startswith(ok + ".") for ok in STORE_MAY_IMPORT)
    ]
    assert offenders == []


# asking which format a sink is: its type, the old `lakehouse` flag, a format's name compared
SINK_BRANCH = re.compile(
    r"sink\.(type|lakehouse|postgres_table)\b"
    r"|[=!]=\s*[\"'](postgres|delta|iceberg|kafka)[\"']"
    r"|[\"'](postgres|delta|iceberg|kafka)[\"']\s*(==|!=|\bin\b|\bnot in\b)"
    r"|\bin\s*\(\s*[\"'](delta|iceberg|postgres|kafka)[\"']"
)
# where a sink's format may be asked: its own packages and its configuration
SINK_HOMES = ("drainer/sinks/", "spark_jobs/sinks/", "drainer/config/")


def _sink_branches(path: str, source: str) -> list[str]:
    if path.startswith(SINK_HOMES):
        return []
    return [
        f"{path}:{n}: {line.strip()}"
        for n, line in enumerate(source.splitlines(), 1)
        if SINK_BRANCH.search(line.split("#", 1)[0])
    ]


def test_nothing_outside_the_sink_packages_branches_on_a_sinks_format():
    """A capability is a field of the sink (drainer.sinks.base.Capabilities), never an
    `if sink.type == ...` in the run's path: a new format is one module, not a hunt."""
    offenders = [
        found
        for path in _python_files()
        for found in _sink_branches(path.relative_to(ROOT).as_posix(), path.read_text())
    ]
    assert offenders == [], "ask the sink instead: " + "; ".join(offenders)


def test_the_sink_branch_check_catches_a_new_branch():
    """The check above would pass vacuously if it never found one."""
    for branch in (
        "if drain.sink.type == 'delta':",
        "table = drain.sink.postgres_table",
        "if ctx.drain.sink.lakehouse:",
        'kind = "Delta" if fmt == "delta" else "Iceberg"',
        'if fmt in ("delta", "iceberg"):',
        'if "iceberg" in formats:',
    ):
        assert _sink_branches("drainer/lifecycle/fake.py", branch), branch
    assert _sink_branches("drainer/sinks/delta.py", "if sink.type == 'delta':") == []
    assert _sink_branches("drainer/lifecycle/fake.py", "sink.describe()  # not sink.type") == []


MAX_MODULE_LINES = 500


def test_no_module_is_over_500_lines():
    """Small modules with one job each: a module past this has two jobs to split."""
    long = {
        path.relative_to(ROOT).as_posix(): n
        for path in _python_files()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"split these (lines): {long}"


# what a command that reads no records must not import (issue 30: the process's fixed cost)
HEAVY = ("pyspark", "dagster", "pyarrow", "pandas", "grpc")


def _loaded_by(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_help_imports_no_config_database_rich_or_spark():
    """`drainer --help` parses arguments: no pydantic model, no SQLAlchemy, no Kafka client,
    no rich, no Spark."""
    loaded = _loaded_by(
        "import contextlib, io, sys\n"
        "from spark_jobs.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "print(' '.join(sys.modules))"
    )
    heavy = {"pydantic", "yaml", "sqlalchemy", "psycopg", "confluent_kafka", "rich", *HEAVY}
    assert not {m.split(".")[0] for m in loaded} & heavy
    assert "spark_jobs.drain_job" not in loaded


def test_plan_and_status_paths_import_no_spark():
    """What `drainer plan` and `drainer status` import (the config, the store, the planner, the
    Kafka session, the import check of a drain's code) brings no pyspark, Dagster or Spark job;
    drainer's own processors (`spark_jobs.examples`, which import pyspark) are checked from their
    source."""
    loaded = _loaded_by(
        "import sys\n"
        "import spark_jobs.cli, spark_jobs.imports, drainer.config\n"
        "import drainer.lifecycle.planning, drainer.observe.status, drainer.kafka.session\n"
        "from drainer.store import get_engine, runs\n"
        "from spark_jobs.imports import _ours_and_defined\n"
        "assert _ours_and_defined('spark_jobs.examples:one_row_per_record')\n"
        "assert not _ours_and_defined('spark_jobs.examples:no_such_processor')\n"
        "print(' '.join(sys.modules))"
    )
    assert not {m.split(".")[0] for m in loaded} & set(HEAVY)
    assert "spark_jobs.drain_job" not in loaded


def test_test_modules_have_unique_basenames():
    """pytest imports tests by basename (rootdir-relative, no packages): two test files of one
    name in unit/ and integration/ stop the whole suite at collection."""
    tests = ROOT / "tests"
    names = [p.name for p in tests.rglob("test_*.py")]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


# a sink writing to the Spark session every run shares: its conf, or an attribute of it
SESSION_NAMES = re.compile(r"(^|_)(spark|session)$|sparkSession$", re.IGNORECASE)


def _is_session(node: ast.AST) -> bool:
    """`spark`, `self.spark`, `rows.sparkSession`: an expression naming a session."""
    if isinstance(node, ast.Name):
        return bool(SESSION_NAMES.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(SESSION_NAMES.search(node.attr))
    return False


def _session_writes(path: str, source: str) -> list[str]:
    """Where `source` changes a shared session: `<session>.conf.set/unset(...)`,
    `setattr(<session>, ...)`, `<session>.<attr> = ...`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr in ("set", "unset")
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "conf"
                and _is_session(func.value.value)
            ):
                found.append(f"{path}:{node.lineno}")
            if (
                isinstance(func, ast.Name)
                and func.id in ("setattr", "delattr")
                and node.args
                and _is_session(node.args[0])
            ):
                found.append(f"{path}:{node.lineno}")
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [
                f"{path}:{node.lineno}"
                for t in targets
                if isinstance(t, ast.Attribute) and _is_session(t.value)
            ]
    return found


def test_no_sink_changes_the_shared_spark_session():
    """Runs of every drain share a session: a sink's per-run settings go with its write (writer
    options) or are set when the session is made (spark_jobs.session), never on the session."""
    offenders = [
        found
        for path in sorted((ROOT / "spark_jobs" / "sinks").rglob("*.py"))
        for found in _session_writes(path.relative_to(ROOT).as_posix(), path.read_text())
    ]
    assert offenders == [], "a sink writes to the shared Spark session: " + "; ".join(offenders)


def test_the_session_check_catches_a_sink_that_writes_to_the_session():
    """The check above would pass vacuously if it never found one."""
    for offender in (
        "spark.conf.set('spark.sql.catalog.x', 'y')\n",
        "rows.sparkSession.conf.unset('k')\n",
        "setattr(spark, '_drainer_server_sink', '')\n",
        "spark._cached = 1\n",
        "self.spark.conf.set('k', 'v')\n",
    ):
        assert _session_writes("spark_jobs/sinks/fake.py", offender), offender
    # a session of its own (own_settings' clone), reads, and writes to other objects are fine
    for fine in (
        "vacuum.conf.set('k', 'v')\n",
        "spark.conf.get('k')\n",
        "self.config = spark\n",
        "write = rows.write.option('k', 'v')\n",
    ):
        assert _session_writes("spark_jobs/sinks/fake.py", fine) == [], fine


# the Kafka sink's modules, its jar and its producer: named only in its own packages
KAFKA_SINK_HOMES = ("drainer/sinks/", "spark_jobs/sinks/")
KAFKA_SINK_WORDS = re.compile(
    r"KafkaTxnSink|drainer-kafka-sink|kafkaSink|run_marker|RunTransaction"
    r"|\bsink_jar\b|\bkafka_server\b|drainer\.sinks\.kafka|spark_jobs\.sinks\.kafka"
    r"|drainer-sink-markers|\bserver producer\b|\bdriver producer\b"
)


def _kafka_sink_mentions(path: str, source: str) -> list[str]:
    if path.startswith(KAFKA_SINK_HOMES):
        return []
    return [
        f"{path}:{n}: {line.strip()}"
        for n, line in enumerate(source.splitlines(), 1)
        if KAFKA_SINK_WORDS.search(line)
    ]


def test_the_kafka_sink_lives_in_the_sink_packages_only():
    """Outside drainer/sinks/ and spark_jobs/sinks/: no module of the Kafka sink, no mention of
    its writer's jar, its producers or its transaction (drainer/kafka/ reads and administers)."""
    offenders = [
        found
        for path in _python_files()
        for found in _kafka_sink_mentions(path.relative_to(ROOT).as_posix(), path.read_text())
    ]
    java = [p for d in CODE_DIRS for p in (ROOT / d).rglob("*.java")]
    offenders += [p.relative_to(ROOT).as_posix() for p in java if "sinks/" not in p.as_posix()]
    assert offenders == [], "the Kafka sink outside its packages: " + "; ".join(offenders)


def test_the_kafka_sink_check_catches_a_mention_outside_its_packages():
    """The check above would pass vacuously if it never found one."""
    for line in (
        "from drainer.sinks.kafka.transactions import RunTransaction\n",
        'SERVER_CONF = "spark.drainer.kafkaSink"\n',
        "# the jar drainer-kafka-sink-<digest>.jar\n",
        "from spark_jobs.sinks.kafka import server\n",
    ):
        assert _kafka_sink_mentions("drainer/services/connect.py", line), line
        assert _kafka_sink_mentions("drainer/sinks/kafka/x.py", line) == []
    assert _kafka_sink_mentions("drainer/kafka/clients.py", "isolation = read_committed\n") == []


# what talks to Kafka as a source and an admin, runs services, runs a drain: no transactions
NO_SINK_TRANSACTIONS = ("drainer/kafka/", "drainer/services/", "drainer/lifecycle/")
SINK_TRANSACTION = re.compile(r"transactional|KafkaTxnSink|run_marker", re.IGNORECASE)


def test_kafka_io_services_and_lifecycle_hold_no_sink_transaction():
    offenders = [
        f"{path.relative_to(ROOT).as_posix()}:{n}"
        for path in _python_files()
        if path.relative_to(ROOT).as_posix().startswith(NO_SINK_TRANSACTIONS)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if SINK_TRANSACTION.search(line)
    ]
    assert offenders == []
    assert SINK_TRANSACTION.search('"transactional.id": self.tid,')  # the check can fail


def test_the_processing_modes_know_no_sink():
    """Record mode stages through what a sink hands it (modes.ChunkStage): `modes` imports no
    sink, so no import runs sinks -> modes -> sinks."""
    source = (ROOT / "spark_jobs" / "modes.py").read_text()
    found = [name for _, name in _imports("spark_jobs.modes", source) if ".sinks" in name]
    assert found == []
    assert [n for _, n in _imports("x", "def f():\n    from spark_jobs.sinks import a\n")]
