"""`pip install .` (not editable) into a fresh virtualenv migrates an empty database and drains.

The virtualenv is made with this interpreter and gets only drainer itself from pip (built from
the checkout, `--no-deps`); its dependencies come from the running environment's site-packages
through a .pth file. That keeps the test quick and offline-cheap (no pyspark download), while
drainer, the `drainer` console script and the migrations are the installed copies: the checkout
is on no path (PYTHONPATH unset, PYTHONSAFEPATH, cwd elsewhere), and a .pth line adds a plain
directory without running that directory's own .pth files, so the running environment's
editable drainer (if any) stays invisible. Spark runs in process (SPARK_MASTER=local[1]) with
PYSPARK_PYTHON the virtualenv's interpreter, so its Python workers import the installed drainer
too, not the checkout a Spark Connect server's workers would see.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import yaml
from sqlalchemy.engine import make_url

from drainer.config import load_drains
from drainer.settings import load_settings, psycopg_url
from tests.support.drains import delete_topics, drain_body

ROOT = Path(__file__).resolve().parents[2]
PRODUCED = {0: 30, 1: 12}  # records per level
NOT_SOURCE = (".git", ".venv*", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis")

pytestmark = pytest.mark.integration


@pytest.fixture
def empty_database(stack) -> Iterator[str]:
    """A brand-new database on the stack's Postgres server; its URL (dropped afterwards)."""
    server = make_url(load_settings().database_url)
    name = f"install_{uuid.uuid4().hex[:10]}"
    admin = psycopg_url(load_settings().database_url)  # any database of the server will do
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def installed_venv(where: Path) -> Path:
    """A virtualenv holding `pip install .` of the checkout; returns its bin/ directory."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    bin_dir = where / "bin"
    venv_python = bin_dir / "python"
    venv_site = subprocess.run(
        [venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(venv_site, "_drainer_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    # a clean copy of the checkout: a stale build/ left by an earlier build would hide a wheel
    # that lacks the migrations
    source = where.parent / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    subprocess.run(
        [venv_python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        + ["--no-deps", str(source)],
        check=True,
        env=clean_env(),
    )
    return bin_dir


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that would point at the checkout or its Spark."""
    dropped = (
        "PYTHONPATH",
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
        "SPARK_REMOTE",
        "VIRTUAL_ENV",
    )
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**env, "PYTHONSAFEPATH": "1", **extra}


@pytest.mark.slow  # 25 s on a quiet machine, 3 min on a busy one (a wheel build, a JVM)
def test_pip_install_migrates_an_empty_database_and_drains(stack, empty_database, tmp_path):
    bin_dir = installed_venv(tmp_path / "venv")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    name = f"inst_{uuid.uuid4().hex[:8]}"
    drains_file = elsewhere / "drains.yaml"
    body = drain_body(
        name,
        levels=2,
        partitions=1,
        budget=1000,
        mode="dataframe",
        processor="spark_jobs.examples:one_row_per_record",
    )
    drains_file.write_text(yaml.safe_dump({"drains": {name: body}}))
    env = clean_env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        DRAINER_DATABASE_URL=empty_database,
        DRAINER_CONFIG=str(drains_file),
        SPARK_MASTER="local[1]",
    )

    def drainer(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(bin_dir / "drainer"), *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"drainer {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    # the code that runs is the installed copy, migrations included
    where = subprocess.run(
        [
            bin_dir / "python",
            "-c",
            "import drainer.store.engine as e; print(e.__file__, e.migrations_dir())",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(path.startswith(str(tmp_path / "venv")) for path in where), where

    try:
        drainer("topics", "create", name)
        for level, count in PRODUCED.items():
            drainer("produce", name, "--level", str(level), "--count", str(count))
        run = json.loads(drainer("run", name, "--json").stdout)
    finally:
        delete_topics(load_drains(drains_file)[name])
    assert run["drained"] == sum(PRODUCED.values())

    shipped = sorted(p.name for p in (ROOT / "sql").glob("*.sql"))
    with psycopg.connect(psycopg_url(empty_database)) as conn:
        applied = [
            r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY version")
        ]
        rows = conn.execute(f'SELECT count(*) FROM "{name}_out"').fetchone()
    assert applied == shipped
    assert rows == (sum(PRODUCED.values()),)
