"""A drain's processor or handler imported where the run will import it, before the run.

The driver imports a dataframe processor (this process); the Spark Connect server's Python
workers import a record-mode handler, from the session's shipped modules (the drains' own
modules this shell imports from outside its environment: drainer.spark.shipped_modules) or the
server's own path. A module that imports in one place and not in the other failed a run deep in
Spark, with advice to "check that the module is installed". Here the import is tried where it
will happen (`check_callables`, run by `drainer plan`), and every failure, found here or
reported by a run's tasks (`import_failed_in_tasks`), says which side lacks the module and the
one fix: usually to put its folder on this shell's PYTHONPATH.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from drainer.errors import ConfigError
from drainer.processing.callables import load_callable
from drainer.settings import Settings

if TYPE_CHECKING:  # pyarrow only in the Spark task that probes a handler: `plan` stays light
    import pyarrow as pa

    from drainer.config import DrainConfig

_OURS = ("drainer", "spark_jobs")  # installed with drainer: every server that runs it has them


def check_callables(drain: DrainConfig, settings: Settings, in_tasks: bool = True) -> None:
    """Import the drain's processor (here, where the driver runs it) or handler (in a Spark
    task, where the run's tasks import it); a failure is one ConfigError naming the fix.

    `in_tasks=False` (`drainer run`, which must not start Spark for an empty run) checks the
    driver's import only; the tasks' is then reported by `import_failed_in_tasks`.
    """
    if drain.mode == "dataframe":
        if drain.processor is not None and not _ours_and_defined(drain.processor):
            _load_here("processor", drain.processor, settings)
        return
    if not in_tasks or drain.handler is None or _module(drain.handler).split(".")[0] in _OURS:
        return
    if settings.spark_endpoint is None or not _local_server_up(settings):
        # in-process Spark (also a run's fallback when the local server is down): its workers
        # inherit this process's PYTHONPATH
        _load_here("handler", drain.handler, settings)
        return
    from spark_jobs.session import get_spark

    path = drain.handler
    reason = (
        get_spark(settings, check=True, callables=(path,))
        .range(1)
        .mapInArrow(lambda batches: _probe(batches, path), "failure string")
        .collect()[0][0]
    )
    if reason:
        kind, _, detail = reason.partition("\t")
        if kind == "import":
            raise import_failed_on_server("handler", path, detail, settings)
        raise ConfigError(f"on the Spark Connect server: {detail}")


def _probe(batches: Iterable[pa.RecordBatch], path: str) -> Iterator[pa.RecordBatch]:
    """In a Spark task: import `path` as a run's task would; `import\\t<reason>` when its
    module does not import, `other\\t<message>` when the function is wrong, else empty."""
    for _ in batches:
        pass
    failure = ""
    try:
        importlib.import_module(path.partition(":")[0])
        load_callable(path, "handler")
    except ImportError as err:
        failure = f"import\t{err}"
    except ConfigError as err:
        failure = f"other\t{err}"
    import pyarrow as pa

    yield pa.RecordBatch.from_pylist([{"failure": failure}])


def import_failed_on_server(
    setting: str, path: str, reason: str, settings: Settings
) -> ConfigError:
    """The Spark Connect server's workers cannot import `path`'s module: say why, and the fix."""
    module = path.partition(":")[0]
    endpoint = settings.spark_endpoint or "the Spark Connect server"
    # the local stack's package (and the sinks it imports) only when a handler failed there:
    # `plan` of a drain whose code imports fine never loads it
    from drainer.services.connect import started_python_path

    server_path = started_python_path(settings)
    if server_path is None:  # a server drainer did not start: only its owner can fix it
        return ConfigError(
            f"{setting} {path!r}: the Spark Connect server at {endpoint} cannot import module "
            f"{module!r} ({reason}): install it where that server's Python workers import from "
            "(its environment or PYTHONPATH)"
        )
    if _importable_here(module):  # not shipped: installed here, or on the server's own path
        return ConfigError(
            f"{setting} {path!r}: the Spark Connect server's workers cannot import module "
            f"{module!r} ({reason}; the server has PYTHONPATH={server_path or '(none)'}, this "
            f"shell {settings.python_path or '(none)'}): install it in this virtualenv, or run "
            "`drainer services up --restart` to start the server with this shell's PYTHONPATH"
        )
    return ConfigError(
        f"{setting} {path!r}: module {module!r} imports neither in this shell nor on the Spark "
        f"Connect server ({reason}): put the folder that holds it on PYTHONPATH (`export "
        "PYTHONPATH=/path/to/folder`); drainer ships it to the server with the run's session"
    )


def _load_here(setting: str, path: str, settings: Settings) -> None:
    """Load `path` in this process (the driver); a module that does not import says the fix."""
    try:
        importlib.import_module(_module(path))
    except ImportError as err:
        raise ConfigError(
            f"{setting} {path!r}: module {_module(path)!r} does not import in this process "
            f"({err}): put the folder that holds it on PYTHONPATH (`export "
            f"PYTHONPATH=/path/to/folder`), or install it in this virtualenv"
        ) from None
    load_callable(path, setting)  # a wrong function name: its own message


def _module(path: str) -> str:
    return path.partition(":")[0]


def _ours_and_defined(path: str | None) -> bool:
    """True for a function of drainer's own modules (`spark_jobs.examples:…`) that its source
    defines at top level: installed with drainer, it imports wherever drainer runs, so `plan`
    checks it without importing it (a processor's module imports pyspark: seconds of a `plan`
    that starts no Spark). Anything else is imported, and fails with its fix."""
    if path is None or _module(path).split(".")[0] not in _OURS:
        return False
    module, _, name = path.partition(":")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return False
    tree = ast.parse(Path(spec.origin).read_text())
    return any(isinstance(node, ast.FunctionDef) and node.name == name for node in tree.body)


def _local_server_up(settings: Settings) -> bool:
    """False only for a local Connect server that is not running (a run falls back to
    in-process Spark then, and so does this check, rather than start a JVM for it)."""
    if not settings.local_spark_connect or settings.spark_endpoint is None:
        return True
    from drainer.spark.endpoint import endpoint_port
    from drainer.spark.net import port_open

    return port_open(*endpoint_port(settings.spark_endpoint))


def _importable_here(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# what a run's task reports when the module does not import there: load_callable's ConfigError,
# or (a dataframe processor's UDF, pickled by reference to its module) the bare import error
_TASK_IMPORT = re.compile(
    r"ConfigError: (handler|processor) '([^']+)': cannot import module '[^']+' \((.*?)\); check"
)
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def import_failed_in_tasks(text: str, drain: DrainConfig, settings: Settings) -> ConfigError | None:
    """A run's Spark error that says its tasks could not import the drain's code, as the one
    line `import_failed_on_server` gives; None for any other error (or in-process Spark)."""
    if settings.spark_endpoint is None:
        return None
    found = _TASK_IMPORT.search(text)
    if found:
        return import_failed_on_server(found.group(1), found.group(2), found.group(3), settings)
    setting, path = (
        ("processor", drain.processor) if drain.mode == "dataframe" else ("handler", drain.handler)
    )
    missing = _NO_MODULE.search(text)
    if missing and path and path.partition(":")[0].split(".")[0] == missing.group(1).split(".")[0]:
        return import_failed_on_server(setting, path, missing.group(0).partition(": ")[2], settings)
    return None
