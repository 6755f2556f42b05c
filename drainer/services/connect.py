"""The local Spark Connect server: one long-lived JVM that every run connects to.

Started from the installed pyspark (`spark-submit --class …SparkConnectServer`), with the Kafka
connector jars, bound to 127.0.0.1, and asking every client for the token in
`<home>/secrets/spark-connect.token` (`spark.connect.authenticate.token`, given to the server in
its environment, not on its command line). Clients reach it as `sc://localhost:<port>`: pyspark
sends a token without TLS only to a host named `localhost`. `up` is idempotent like the broker's: a server we started
(pid file + live process) is reused, a server somebody else runs on the port is used as is, and
only a free port gets a new server. Its Python workers run the interpreter of this virtualenv with
the PYTHONPATH of whoever started it; a client's own processor modules, from any folder, travel
with its session (drainer.spark.shipped_modules), so another PYTHONPATH is no reason to restart.

Imports neither pyspark nor dagster: the server is a process, found through pyspark's metadata.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from drainer.config.kafka_clients import SPARK_REDACTION_REGEX
from drainer.errors import ServiceError
from drainer.local_secrets import CONNECT_TOKEN, ensure_secret
from drainer.services import connect_users, process
from drainer.services.connect_logging import log4j2, redact_log, roll_console_log
from drainer.services.kafka_pools import KAFKA_POOLS, POOLS_MARK
from drainer.services.status import ServiceStatus
from drainer.settings import DEFAULT_CONNECT_PORT, Settings
from drainer.sinks import ServerCode, configured_formats, server_code, server_conf
from drainer.spark.endpoint import endpoint_port, redacted
from drainer.spark.jars import lakehouse_jars, pyspark_version, spark_kafka_jars
from drainer.spark.net import port_open
from drainer.spark.tools import require

NAME = "connect"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
MARKER = SERVER_CLASS  # on the server's command line; tells our pid from a reused one
START_TIMEOUT_SECONDS = 120.0
HOST = "127.0.0.1"  # where the server binds
CLIENT_HOST = "localhost"  # how clients name it: pyspark's local credentials carry the token
NO_PLANS_LOGGED = "logs=no-plans"  # on `started_with`: its log4j2 keeps requests out
OWN_SCRATCH = "scratch=own"  # on `started_with`: its temp dirs in ConnectPaths.scratch
ROLLING_LOG = "log=rolling"  # on `started_with`: a server started with this logging
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # the server's spark.connect.authenticate.token
# forks Spark's Python workers with drainer's task modules already imported
WORKER_DAEMON = "spark_jobs.worker_daemon"
# the server's session defaults; a client may change them per session (runtime SQL settings)
SESSION_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.python.daemon.module": WORKER_DAEMON,
    "spark.ui.showConsoleProgress": "false",
    # SASL's generated JAAS line and inline PEM keys are secrets too (plan text, UI, logs)
    "spark.redaction.regex": SPARK_REDACTION_REGEX,
    "spark.sql.redaction.options.regex": SPARK_REDACTION_REGEX,
    **KAFKA_POOLS,
}

Echo = Callable[[str], None]


@dataclass(frozen=True)
class ConnectPaths:
    root: Path

    @classmethod
    def under(cls, home: Path, name: str = "spark-connect") -> ConnectPaths:
        return cls(home / name)

    @classmethod
    def local(cls, settings: Settings) -> ConnectPaths:
        """The local server's files; a server on another port keeps its own beside them."""
        if settings.connect_port == DEFAULT_CONNECT_PORT:
            return cls.under(settings.home)
        return cls.under(settings.home, f"spark-connect-{settings.connect_port}")

    @property
    def pid_file(self) -> Path:
        return self.root / "server.pid"

    @property
    def server_log(self) -> Path:
        """Spark's log, rolled over at LOG_ROLL_SIZE (LOG_ROLLS kept: `server.log.1` …)."""
        return self.root / "server.log"

    @property
    def console_log(self) -> Path:
        """The process's own output: spark-submit, warnings and errors, Python workers' stderr."""
        return self.root / "console.log"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def scratch(self) -> Path:
        """The server's scratch space (`spark.local.dir`, `java.io.tmpdir`). A killed server
        leaves its temp dirs behind (~70 MB of session jars each), so a start empties it, where
        in /tmp they would pile up until the disk is full."""
        return self.root / "tmp"

    @property
    def started_with(self) -> Path:
        """What the running server was started with (master, PYTHONPATH), for `status`."""
        return self.root / "started_with"


def spark_home() -> Path:
    """The installed pyspark package: it is a Spark distribution (bin/, jars/), found without
    importing pyspark."""
    try:
        home = Path(str(importlib.metadata.distribution("pyspark").locate_file("pyspark")))
    except importlib.metadata.PackageNotFoundError as exc:
        raise ServiceError(
            "pyspark is not installed in this environment: pip install -e ."
        ) from exc
    if not (home / "bin" / "spark-submit").exists():
        raise ServiceError(f"{home} has no bin/spark-submit: reinstall pyspark (pip install -e .)")
    return home


def spark_env(settings: Settings, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a Spark JVM we start: this interpreter for Python workers, loopback only.

    SPARK_REMOTE and SPARK_MASTER are removed: a server (or cluster daemon) must not try to be
    a Connect client itself, nor take the client's master for its own.
    """
    client_only = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_MASTER")
    env = {k: v for k, v in os.environ.items() if k not in client_only}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=HOST,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(settings.home / "spark-logs"),
        SPARK_PID_DIR=str(settings.home / "spark-pids"),
    )
    if settings.python_path:
        env["PYTHONPATH"] = settings.python_path
    env.update(extra or {})
    return env


def up(
    settings: Settings,
    echo: Echo = print,
    formats: tuple[str, ...] | None = None,
    restart: bool = False,
    wait_s: float = 0.0,
) -> ServiceStatus:
    """Make the Connect server answer at sc://127.0.0.1:15002 (DRAINER_CONNECT_PORT), starting
    ours if the port is free.

    With SPARK_REMOTE set, only checks that it answers; with SPARK_MASTER set (and no
    SPARK_REMOTE), runs use an in-process session, so nothing is started. `formats`: the table
    formats (delta, iceberg) whose jars the server loads; default: those the drains file uses.
    A server that must restart while runs use it is waited for up to `wait_s`, then refused
    (ServiceError naming the runs), unless `restart`.
    """
    if settings.spark_remote:
        return _check_remote(settings.spark_remote)
    if not settings.local_spark_connect:
        return ServiceStatus(
            NAME, False, "-", None, f"not used: SPARK_MASTER={settings.spark_master} (in-process)"
        )
    with ExitStack() as held:  # new runs wait while a restart is under way
        paths = ConnectPaths.local(settings)
        port = settings.connect_port
        return start(settings, paths, port, "local[*]", echo, None, formats, restart, wait_s, held)


def start(
    settings: Settings,
    paths: ConnectPaths,
    port: int,
    master: str,
    echo: Echo = print,
    conf: Mapping[str, str] | None = None,
    formats: tuple[str, ...] | None = None,
    restart: bool = False,
    wait_s: float = 0.0,
    held: ExitStack | None = None,
) -> ServiceStatus:
    """Start (or reuse) a Connect server on 127.0.0.1:`port` running on `master`.

    Also used to attach a server to a standalone cluster (`master="spark://…"`). `formats`: the
    table formats whose jars and SQL extensions it loads (default: the drains file's), added to
    those a running server has (one user's drains file never takes another's jars away); a
    running server that lacks one is restarted, since a client cannot add jars to it.

    A restart never pulls the server from under a run (`connect_users`): it waits `wait_s`
    for the runs using it, then refuses naming them, unless `restart`; `held` keeps the server
    from new runs until the caller is done (they wait for the new server).
    """
    address = f"sc://{CLIENT_HOST}:{port}"
    formats = configured_formats(settings) if formats is None else formats
    token = ensure_secret(settings.home, CONNECT_TOKEN)
    # a sink's own code runs in the server's JVM where the tasks do (a local master)
    sinks_code = (
        server_code(settings.home, spark_kafka_jars(settings.home))
        if master.startswith("local")
        else ServerCode()
    )
    for problem in sinks_code.problems:  # each sink still works without it
        echo(f"{NAME:<9} {problem}")
    sink_jars = sinks_code.jars
    pid = process.our_pid(paths.pid_file, MARKER)
    if pid is not None:  # additive: what it loaded for others stays
        formats = tuple(sorted(set(formats) | set(_formats_in(_started_with(paths).split()))))
    if (
        pid is not None
        and (reason := restart_reason(paths, settings, formats, sink_jars)) is not None
    ):
        connect_users.hold_for_restart(paths.root, address, reason, wait_s, restart, held)
        echo(f"{NAME:<9} restarting pid {pid}: {reason} (it runs {_started_with(paths)})")
        process.terminate(pid)
        _wait_port_free(port)
        pid = None
    if pid is not None:
        _wait_ready(port, paths, pid, proc=None)
        return ServiceStatus(NAME, True, address, pid, _detail(paths, settings, "already running"))
    paths.pid_file.unlink(missing_ok=True)
    if port_open(HOST, port):
        echo(f"{NAME:<9} a server not started by drainer listens at {address}; using it")
        return ServiceStatus(NAME, True, address, None, "not started by drainer")
    require("java")
    jars = ",".join(
        str(j) for j in [*spark_kafka_jars(settings.home), *lakehouse_jars(settings.home, formats)]
    )
    settings_conf = {
        **server_conf(formats),
        **SESSION_DEFAULTS,
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.sql.shuffle.partitions": settings.shuffle_partitions,
        "spark.local.dir": str(paths.scratch),
        **(conf or {}),
    }
    if sinks_code.classpath:  # the JVM's class path: a session's loader won't share it across tasks
        settings_conf["spark.driver.extraClassPath"] = ":".join(map(str, sinks_code.classpath))
        settings_conf.update(sinks_code.conf)
    home = spark_home()
    cmd = [
        str(home / "bin" / "spark-submit"),
        "--class",
        SERVER_CLASS,
        "--name",
        f"drainer Spark Connect server on port {port}",
        "--master",
        master,
        "--driver-memory",
        settings.spark_driver_memory,
        "--jars",
        jars,
        "--driver-java-options",
        f"-Dlog4j2.configurationFile=file:{paths.log4j} -Djava.io.tmpdir={paths.scratch}",
    ]
    for key, value in settings_conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd.append("spark-internal")
    paths.root.mkdir(parents=True, exist_ok=True)
    process.fresh_scratch(paths.scratch)  # no server of ours runs on it: port free
    paths.log4j.write_text(log4j2(paths.server_log))
    if not _logs_no_plans(paths):  # the last server was an older drainer's: its logs held plans
        redact_log(paths.server_log)
    # the console takes the Python workers' prints: a foreachBatch worker's holds the token
    roll_console_log(paths.console_log)
    echo(f"{NAME:<9} starting a Spark Connect server at {address} ({master})")
    with paths.console_log.open("ab") as out:
        paths.console_log.chmod(0o600)  # as Spark's log: the server's own, not every user's
        proc = subprocess.Popen(
            process.with_default_signals(cmd),
            cwd=paths.root,
            env=spark_env(settings, {TOKEN_ENV: token}),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this process, like the broker
        )
    _children[proc.pid] = proc
    process.write_pid(paths.pid_file, proc.pid)
    paths.started_with.write_text(started_with(master, formats, settings, sink_jars) + "\n")
    _wait_ready(port, paths, proc.pid, proc)
    return ServiceStatus(NAME, True, address, proc.pid, _detail(paths, settings, "started"))


def stop(
    settings: Settings, echo: Echo = print, paths: ConnectPaths | None = None
) -> ServiceStatus:
    """Stop the server we started (SIGTERM, then SIGKILL after 30 s)."""
    paths = paths or ConnectPaths.local(settings)
    address = f"sc://{CLIENT_HOST}:{settings.connect_port}"
    if settings.spark_remote:
        shown = redacted(settings.spark_remote)
        return ServiceStatus(NAME, _answers(settings.spark_remote), shown, None, "not ours to stop")
    pid = process.our_pid(paths.pid_file, MARKER)
    if pid is None:
        paths.pid_file.unlink(missing_ok=True)
        return ServiceStatus(NAME, False, address, None, "not started by drainer")
    echo(f"{NAME:<9} stopping pid {pid}")
    killed = process.terminate(pid)
    paths.pid_file.unlink(missing_ok=True)
    _wait_port_free(settings.connect_port)
    return ServiceStatus(NAME, False, address, None, "killed" if killed else "stopped")


def started_with(
    master: str,
    formats: Iterable[str],
    settings: Settings,
    sink_jars: Mapping[str, str] | None = None,
) -> str:
    """The line a server we start leaves in `started_with`: what `status` shows, and what
    `restart_reason` reads back when the server is found running. `sink_jars`: each sink's
    code in the server's JVM by sink type (`-`: none), as `<type>_sink=<jar>`."""
    jars = "".join(f"{kind}_sink={jar} " for kind, jar in (sink_jars or {}).items())
    return (
        f"master={master} pyspark={pyspark_version()} python={sys.executable} "
        f"lakehouse={','.join(formats) or '-'} auth=token {NO_PLANS_LOGGED} {ROLLING_LOG} "
        f"{OWN_SCRATCH} {POOLS_MARK} {jars}{_code_of(settings)}"
    )


def restart_reason(
    paths: ConnectPaths,
    settings: Settings,
    formats: Iterable[str],
    sink_jars: Mapping[str, str] | None = None,
) -> str | None:
    """Why the running server of `paths` cannot serve this environment's runs, or None when it
    can: a client cannot change what a server was started with, so each is a restart."""
    started = _started_with(paths)
    words = started.split()
    if f"env={sys.prefix}" not in words:
        was = next((w.removeprefix("env=") for w in words if w.startswith("env=")), "unknown")
        return (
            f"its Python workers run the environment {was}, this shell {sys.prefix}: they "
            "would import another installation's drainer"
        )
    if f"pyspark={pyspark_version()}" not in words:
        # an upgrade in place replaced the jars it loads classes from as it goes
        return f"it was started from another pyspark than this environment's {pyspark_version()}"
    missing = sorted(set(formats) - set(_formats_in(words)))
    if missing:
        return f"it lacks the jars of {', '.join(missing)}"
    if "auth=token" not in words or NO_PLANS_LOGGED not in words:
        return (
            "an older drainer started it without a token, or with Spark's default logging "
            "(whole requests, secrets and all, in its log)"
        )
    if ROLLING_LOG not in words:
        return "its log never rolls over"
    if OWN_SCRATCH not in words:
        return "it keeps its temp files in /tmp, where a kill leaves them"
    if POOLS_MARK not in words:  # e.g. Spark's evictor: idle consumers held for hours
        return "its Kafka pools are not this drainer's (docs/operations.md)"
    for kind, jar in (sink_jars or {}).items():
        if jar != "-" and f"{kind}_sink={jar}" not in words:
            return f"it lacks this version of the {kind} sink's code for the server's JVM"
    return None


def _code_of(settings: Settings) -> str:
    """The environment a server's Python workers run, and the PYTHONPATH they import from
    (shown; a client's own modules outside both travel with its session's artifacts)."""
    return f"env={sys.prefix} PYTHONPATH={settings.python_path or '(none)'}"


def started_python_path(settings: Settings) -> str | None:
    """The PYTHONPATH the local Connect server was started with (`""` for none), or None when
    runs do not use the local server or it left no record; an import error names it."""
    if not settings.local_spark_connect:
        return None
    for word in _started_with(ConnectPaths.local(settings)).split():
        if word.startswith("PYTHONPATH="):
            value = word.removeprefix("PYTHONPATH=")
            return "" if value == "(none)" else value
    return None


def _started_with(paths: ConnectPaths) -> str:
    try:
        return paths.started_with.read_text().strip()
    except FileNotFoundError:
        return ""


def _formats_in(words: list[str]) -> list[str]:
    """The table formats a server was started with (`lakehouse=` in its started_with)."""
    for word in words:
        if word.startswith("lakehouse="):
            return [f for f in word.removeprefix("lakehouse=").split(",") if f != "-"]
    return []


def _logs_no_plans(paths: ConnectPaths) -> bool:
    return NO_PLANS_LOGGED in _started_with(paths).split()


def _runs_this_code(paths: ConnectPaths) -> bool:
    """Its Python workers run this environment (whatever PYTHONPATH it was started with: a
    drain's own modules are shipped with the session, drainer.spark.shipped_modules)."""
    return f"env={sys.prefix}" in _started_with(paths).split()


def _wait_port_free(port: int, seconds: float = 30.0) -> None:
    """A JVM's shutdown hooks may hold the port a moment after the process got its signal."""
    deadline = time.monotonic() + seconds
    while port_open(HOST, port) and time.monotonic() < deadline:
        time.sleep(0.2)


def status(settings: Settings) -> ServiceStatus:
    """Whether the Connect server runs answers, whether it is ours, and what it runs with."""
    if settings.spark_remote:
        ok = _answers(settings.spark_remote)
        return ServiceStatus(
            NAME, ok, redacted(settings.spark_remote), None, "external" if ok else "not reachable"
        )
    if not settings.local_spark_connect:
        return ServiceStatus(
            NAME, False, "-", None, f"not used: SPARK_MASTER={settings.spark_master} (in-process)"
        )
    address = f"sc://{CLIENT_HOST}:{settings.connect_port}"
    paths = ConnectPaths.local(settings)
    pid = process.our_pid(paths.pid_file, MARKER)
    ok = port_open(HOST, settings.connect_port)
    if pid is not None:
        return ServiceStatus(
            NAME, ok, address, pid, _detail(paths, settings, "" if ok else "starting")
        )
    if ok:
        return ServiceStatus(NAME, True, address, None, "not started by drainer")
    return ServiceStatus(NAME, False, address, None, "stopped (runs fall back to local[*])")


def _detail(paths: ConnectPaths, settings: Settings, state: str) -> str:
    started = _started_with(paths)
    parts = [p for p in (state, started) if p]
    if started and not _runs_this_code(paths):
        parts.append(
            f"this shell runs env={sys.prefix}: `drainer services up` restarts the server "
            "so its Python workers run the same code"
        )
    return "; ".join(parts)


def _answers(endpoint: str) -> bool:
    host, port = endpoint_port(endpoint)
    return port_open(host, port, timeout=5.0)


def _check_remote(endpoint: str) -> ServiceStatus:
    """SPARK_REMOTE was given: never start anything, only check that it listens."""
    if not _answers(endpoint):
        raise ServiceError(
            f"the Spark Connect server at {redacted(endpoint)} (SPARK_REMOTE) did not answer "
            "within 5 s; "
            "check the address, or unset SPARK_REMOTE to run a local one"
        )
    return ServiceStatus(NAME, True, redacted(endpoint), None, "external")


_children: dict[int, subprocess.Popen[bytes]] = {}  # keeps Popen objects from warning on GC


def _wait_ready(
    port: int, paths: ConnectPaths, pid: int, proc: subprocess.Popen[bytes] | None
) -> None:
    """The gRPC port opens once the server's SparkContext is up: wait for it."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        gone, exited = process.exit_status(proc, pid, MARKER)
        if gone:
            paths.pid_file.unlink(missing_ok=True)
            raise ServiceError(f"the Spark Connect server exited (code {exited}).\n{_logs(paths)}")
        if port_open(HOST, port):
            return
        time.sleep(0.5)
    process.terminate(pid)
    paths.pid_file.unlink(missing_ok=True)
    raise ServiceError(
        f"the Spark Connect server did not listen on {HOST}:{port} within "
        f"{START_TIMEOUT_SECONDS:.0f} s; stopped it.\n{_logs(paths)}"
    )


def _logs(paths: ConnectPaths) -> str:
    """What the server printed (errors, spark-submit's own output) first, then Spark's log."""
    return process.last_lines(paths.console_log, 30, paths.server_log, 15)
