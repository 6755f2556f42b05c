"""The Python worker daemon of the Spark servers drainer starts: pyspark's own, with the modules
drainer's tasks import loaded once, before it forks a worker.

Spark starts a Python worker by forking its daemon, and a new worker imports what its task's
function needs when it unpickles it: for a Postgres stage or a record-mode chunk that is drainer's
sink and store code with pyarrow, psycopg, SQLAlchemy and pydantic, ~0.5 s on a 2-core machine.
Spark hands most tasks of a stage a new worker (it closes a worker whose task ended before the
worker was handed back), and a worker idle for a minute ends, so a run paid that import once
per new worker. A worker forked from this daemon starts with them.

Preloaded code is the code of the session the daemon serves: Spark keeps one daemon per worker
environment, which names the Connect session, and a client opens a new session when drainer's
code changes (`spark_jobs.session`), so a new daemon imports the new code.
"""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import os
import re
import sys
import zipfile

# the modules whose functions run in Spark tasks (each imports the rest of what its tasks use)
PRELOADED = (
    "spark_jobs.sinks.postgres",  # the Postgres stage (dataframe mode)
    "spark_jobs.modes",  # record mode: handlers, staging, dead letters
    "spark_jobs.protobuf_decode",  # records decoded from Protobuf
    "drainer.spark.connect_session",  # the code fingerprint a session measures on the server
)


# the archives Spark puts first on its Python workers' path that hold pyspark itself
SPARK_ARCHIVES = re.compile(r"^(pyspark\.zip|spark-core_[^/]*\.jar)$")
_VERSION = re.compile(r"""__version__[^=]*=\s*['"]([^'"]+)['"]""")


def drop_spark_archives(path: list[str] | None = None) -> list[str]:
    """Take pyspark from site-packages, not from Spark's archives, when both are one version.

    pyspark's worker calls `importlib.invalidate_caches()` before every task, and on Python
    3.11 and 3.12 each zipimporter then reads its archive's whole directory again: one
    importer per pyspark package imported from pyspark.zip (13 on drainer's server) and two
    on spark-core's jar, ~27,000 entries, 0.1 s of every Python task (benchmarks/README.md,
    "Issue 30, ninth part"). Imported from site-packages, pyspark leaves no zipimporter. A
    Spark whose Python has no pyspark installed, or another version, keeps its archives.
    Returns the entries dropped from `path` (`sys.path`).
    """
    path = sys.path if path is None else path
    archives = [p for p in path if SPARK_ARCHIVES.match(os.path.basename(p))]
    zipped = next((p for p in archives if p.endswith(".zip")), None)
    loaded = getattr(sys.modules.get("pyspark"), "__file__", None) or ""
    if zipped is None or any(loaded.startswith(a + os.sep) for a in archives):
        return []  # no archive, or pyspark already imported from it
    try:
        # not drainer.spark.jars.pyspark_version: importing drainer here, before the archives
        # leave the path, leaves an importer on spark-core's jar (its `org/`, which the
        # standard library's Jython probes look for) that every task would re-read again
        installed = importlib.metadata.version("pyspark")
        with zipfile.ZipFile(zipped) as archive:
            found = _VERSION.search(archive.read("pyspark/version.py").decode())
    except (OSError, KeyError, zipfile.BadZipFile, importlib.metadata.PackageNotFoundError):
        return []
    if found is None or found.group(1) != installed:
        return []
    for entry in archives:
        path.remove(entry)
        # the importer its lookups made so far (`-m spark_jobs.worker_daemon` walked the path)
        sys.path_importer_cache.pop(entry, None)
    return archives


def preload(modules: tuple[str, ...] = PRELOADED) -> list[str]:
    """Import `modules`; return the ones that failed. A failure is not the daemon's: the task
    that needs the module imports it again, and reports the error where the run shows it."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - reported by the task that needs it
            failed.append(name)
            print(f"drainer worker daemon: {name} not preloaded: {err!r}", file=sys.stderr)
    # what is loaded now is shared with every forked worker: kept out of the collector's scans,
    # so a worker's collections neither walk it nor copy its pages
    gc.freeze()
    return failed


if __name__ == "__main__":
    drop_spark_archives()  # before pyspark is imported, by the preload or the daemon
    from pyspark import daemon

    preload()
    daemon.manager()  # type: ignore[no-untyped-call]  # pyspark.daemon has no hints
