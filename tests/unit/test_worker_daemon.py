"""drainer's Python worker daemon preloads what its tasks import; a module that fails to
import is left to the task that needs it, which reports it where the run shows errors. It
takes pyspark from site-packages rather than Spark's archives when both are one version."""

from __future__ import annotations

import gc
import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spark_jobs.worker_daemon import PRELOADED, drop_spark_archives, preload


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


def _spark_path(tmp_path: Path, version: str) -> list[str]:
    """A worker's path as Spark starts it: its archives first, then the Python's own."""
    zipped = tmp_path / "python" / "lib" / "pyspark.zip"
    zipped.parent.mkdir(parents=True)
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("pyspark/version.py", f'__version__: str = "{version}"\n')
    jar = tmp_path / "jars" / "spark-core_2.13-4.1.3.jar"
    jar.parent.mkdir()
    zipfile.ZipFile(jar, "w").close()
    py4j = str(tmp_path / "python" / "lib" / "py4j-0.10.9.9-src.zip")
    return [str(zipped), py4j, str(jar), "/usr/lib/python3.11", "/venv/site-packages"]


def test_spark_archives_of_the_installed_version_leave_the_path(tmp_path):
    path = _spark_path(tmp_path, importlib.metadata.version("pyspark"))
    dropped = drop_spark_archives(path)
    assert [Path(p).name for p in dropped] == ["pyspark.zip", "spark-core_2.13-4.1.3.jar"]
    assert [Path(p).name for p in path] == ["py4j-0.10.9.9-src.zip", "python3.11", "site-packages"]


def test_archives_of_another_version_stay(tmp_path):
    path = _spark_path(tmp_path, "3.5.1")
    assert drop_spark_archives(path) == []
    assert len(path) == 5


def test_archives_stay_where_pyspark_is_not_installed(tmp_path, monkeypatch):
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    path = _spark_path(tmp_path, "4.1.3")
    assert drop_spark_archives(path) == []
    assert len(path) == 5


def test_a_path_without_spark_archives_is_left_alone():
    path = ["/usr/lib/python3.11", "/venv/site-packages"]
    assert drop_spark_archives(path) == []
    assert path == ["/usr/lib/python3.11", "/venv/site-packages"]


@pytest.mark.parametrize("broken", [b"not a zip", None])
def test_an_unreadable_archive_stays(tmp_path, broken):
    zipped = tmp_path / "pyspark.zip"
    if broken is not None:
        zipped.write_bytes(broken)
    path = [str(zipped), "/venv/site-packages"]
    assert drop_spark_archives(path) == []
    assert len(path) == 2


def test_archives_stay_once_pyspark_was_imported_from_them(tmp_path, monkeypatch):
    path = _spark_path(tmp_path, importlib.metadata.version("pyspark"))
    from_archive = type(sys)("pyspark")
    from_archive.__file__ = f"{path[0]}/pyspark/__init__.py"
    monkeypatch.setitem(sys.modules, "pyspark", from_archive)
    assert drop_spark_archives(path) == []
    assert len(path) == 5
