"""The Spark session of a process: a Spark Connect client by default, in-process on request.

Which Spark (Settings.spark_endpoint; docs/operations.md):
- SPARK_REMOTE=sc://host:port: a Connect client of that server; this process starts no JVM;
- SPARK_MASTER=local[*] | spark://host:port (and no SPARK_REMOTE): an in-process session (a JVM
  in this process) on that master;
- neither: the local Connect server that `drainer services up` runs at sc://localhost:15002,
  sent the token it requires (`<home>/secrets/spark-connect.token`); when it is not running, an
  in-process `local[*]` session (said so on stderr).

The connector jars are resolved with Maven (`drainer services up`) rather than Spark's own Ivy
resolver, which ignores Maven's settings and mirrors.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pyspark.sql import SparkSession

from drainer.config import load_drains
from drainer.config.kafka_clients import SPARK_REDACTION_REGEX
from drainer.errors import DrainerError
from drainer.services.connect import started_python_path
from drainer.settings import Settings, export_spark_python_env
from drainer.sinks import configured_formats, server_conf, sink_for
from drainer.spark.connect_session import (
    code_fingerprint,
    known_server_code,
    remember_server_code,
    shared_session_id,
    with_session_id,
)
from drainer.spark.endpoint import client_url, endpoint_port, redacted
from drainer.spark.jars import lakehouse_jars, spark_kafka_jars
from drainer.spark.net import port_open
from drainer.spark.parallelism import local_cores, snapshot_partitions
from drainer.spark.shipped_modules import Bundle, bundle, to_ship, top_level

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

log = logging.getLogger(__name__)

SESSION_CLOSED = "INVALID_HANDLE.SESSION_CLOSED"
# the tasks Delta replays its log in (OPTIMIZE, VACUUM, the checkpoint after a commit, loading
# a snapshot): Delta's default, 50, is for clusters; on two cores it made a small run 1.9 s
# instead of 1.14 s (benchmarks/README.md, "Delta's log replay"). A run's: as many as the
# shuffle's, at most the cores (`snapshot_partitions`); maintenance's: the shuffle's.
DELTA_SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
# ids of closed sessions walked past before giving up (a new home starts at the first one)
MAX_CLOSED = 100
# the sources Spark reads through their old (V1) relation; Kafka's is taken off it (`v2_reads`)
V1_SOURCES = "spark.sql.sources.useV1SourceList"
KAFKA_SOURCE = "kafka"  # Spark's Kafka source, as reads name it (spark_jobs.kafka_source)

_sessions: dict[str, SparkSession] = {}


@dataclass(frozen=True)
class MadeAt:
    """Where drainer opened a Connect session: its server's address (with the token, no
    session id), and the folder and endpoint its kept sessions' ids are derived under."""

    address: str
    directory: Path
    endpoint: str


# the Connect sessions `_connect` opened, by id(): `spark_jobs.own_session` opens others there
_made_at: dict[int, MadeAt] = {}
_lock = threading.Lock()


def get_spark(
    settings: Settings,
    check: bool = False,
    sink_conf: Mapping[str, str] | None = None,
    callables: Sequence[str | None] = (),
) -> SparkSession:
    """The session for `settings`, created once per process, endpoint (or master) and the
    settings the drains' sinks need a session made with (their catalogs: `sinks_session_conf`):
    a drains file that defines another catalog gets a session of its own, since sinks never
    change a session that runs share.

    `sink_conf`: the session settings of the sink a run writes (`Sink.session_conf`), so a
    run of a drain that the drains file does not hold still gets a session made for it.

    `callables`: the run's own processor and handler, shipped with the drains file's (a
    drain handed in as an object may not be in the drains file).

    `check` (once per run): a Connect session whose server was restarted since is replaced
    rather than handed out dead; a long-lived process (a Dagster code server, a test session)
    then outlives a Connect server restart with no failed run.
    """
    endpoint = settings.spark_endpoint
    if endpoint is not None and settings.spark_remote is None:
        host, port = endpoint_port(endpoint)
        if not port_open(host, port):
            print(
                f"drainer: no Spark Connect server at {endpoint} (`drainer services up` starts "
                f"one); using an in-process {settings.spark_master} session",
                file=sys.stderr,
            )
            endpoint = None
    # the run's own sink too: a drain handed in as an object may not be in the drains file
    made_with = {**sinks_session_conf(settings), **(sink_conf or {})}
    key = f"{endpoint or settings.spark_master} {_conf_key(made_with)}"
    shipped = drain_modules(settings, callables) if endpoint else None
    if shipped is not None:  # an edited module: a session whose workers import it afresh
        key = f"{key} {shipped.digest}"
    with _lock:
        session = _sessions.get(key)
        if session is not None and check and not _still_served(session):
            log.warning(
                "the Spark Connect session at %s ended (server restarted?): opening another", key
            )
            _sessions.pop(key, None)
            session = None
        if session is None:
            session = (
                _connect(endpoint, settings, made_with, shipped)
                if endpoint
                else _in_process(settings, made_with)
            )
            _sessions[key] = session
    _make_current(session)
    return session


def _make_current(spark: SparkSession) -> None:
    """Make `spark` the process's default and this thread's active Connect session.

    pyspark's own helpers (a DDL string's parser, its error context) ask for "the active
    session", and a Connect client becomes it only when none is set yet. A process holds one
    session per set of sink catalogs: after a server restart replaced the run's, the other one,
    as dead but not yet found so, stayed active and failed the run's schema parse.
    """
    if not is_connect(spark):
        return  # one SparkContext: its sessions share the JVM's notion of active
    connect_session = type(spark)
    with connect_session._lock:  # type: ignore[attr-defined]
        connect_session._default_session = spark  # type: ignore[attr-defined]
    connect_session._active_session.session = spark  # type: ignore[attr-defined]


def _conf_key(conf: dict[str, str]) -> str:
    """A session's sink settings as a key (a digest: they may hold a catalog's password)."""
    return hashlib.sha256(repr(sorted(conf.items())).encode()).hexdigest()[:16]


def _still_served(spark: SparkSession) -> bool:
    """False when a Connect session's server no longer knows it (one cheap round trip).

    A restarted server answers the old session with INVALID_HANDLE.SESSION_CHANGED and pyspark
    closes the client; any other error (the server is down) is the run's to report.
    """
    if not is_connect(spark):
        return True
    try:
        if not cast("ConnectSession", spark).is_stopped:
            spark.conf.get("spark.sql.session.timeZone")
            return True
    except Exception as err:
        gone = "SESSION_CHANGED" in str(err) or SESSION_CLOSED in str(err)
        if not gone and not cast("ConnectSession", spark).is_stopped:
            return True
    drop_client(spark)
    return False


# pyspark's SparkSession.__del__ closes its client, and closing any Connect client shuts down the
# release thread pool that all of the process's clients share, waiting for its threads. Run by
# the garbage collector inside one of those threads while it held a gRPC channel's lock, that
# deadlocked the process: a suite's run hung after the Connect server restarted, its main thread
# and both pool threads waiting on one another. A client drainer drops is therefore kept
# referenced and never collected: one per server restart or closed session, a closed channel each.
_dropped: list[SparkSession] = []


def _close_clients() -> None:
    """Close this process's Connect clients while its threads still run; sessions stay served.

    Left to the interpreter's last teardown, each client is closed by `SparkSession.__del__`
    after Python froze the daemon threads: one of gRPC's, frozen holding its channel's lock,
    hung the process for good after its work was done (seen in about 1 exit in 15 of a
    process whose other session the server had released). Registered at import, this runs
    after pyspark's own exit handlers, which still need the clients open.
    """
    for spark in [*_sessions.values(), *_dropped]:
        if is_connect(spark):
            with contextlib.suppress(Exception):
                cast("ConnectSession", spark).client.close()


atexit.register(_close_clients)


def drop_client(spark: SparkSession) -> None:
    """Stop a Connect client without releasing its session on the server (gone, or another
    process's); else pyspark's functions keep asking it, still the process's active session.
    The way to let go of any Connect client in a process that goes on (see `_dropped`)."""
    cast("ConnectSession", spark).release_session_on_close = False
    with contextlib.suppress(Exception):
        spark.stop()
    _dropped.append(spark)


def made_at(spark: SparkSession) -> MadeAt | None:
    """Where drainer opened this Connect session; None for one it did not open."""
    return _made_at.get(id(spark))


def describe(spark: SparkSession) -> str:
    """Which Spark a session is, for logs and the demo: `Spark Connect sc://… (Spark 4.1.3 …)`."""
    master = spark.conf.get("spark.master", "?")
    if is_connect(spark):
        endpoint = next((k.split(" ", 1)[0] for k, v in _sessions.items() if v is spark), "?")
        return f"Spark Connect {redacted(endpoint)} (Spark {spark.version}, server master {master})"
    return f"in-process Spark {spark.version} on {master}"


def cores(spark: SparkSession) -> int | None:
    """The cores that run a job's tasks, where the session says (`spark.default.parallelism`,
    or a `local[N]` / `local[*]` master: this machine's, as a local Connect server's); None for a
    cluster that does not say, whose reads then keep one task per Kafka partition."""
    parallelism = spark.conf.get("spark.default.parallelism", None)
    if parallelism:
        return int(parallelism)
    return local_cores(str(spark.conf.get("spark.master", "")))


def shares_files(spark: SparkSession, settings: Settings) -> bool:
    """Whether Spark's tasks read this machine's files: the local Connect server, or an
    in-process session, on a `local` master (a cluster's executors, or a server elsewhere, have
    files of their own)."""
    if is_connect(spark) and not settings.local_spark_connect:
        return False
    return str(spark.conf.get("spark.master", "")).startswith("local")


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect client session (no SparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def drain_modules(settings: Settings, callables: Sequence[str | None] = ()) -> Bundle | None:
    """The drains' own modules (and `callables`') that a Connect session ships to its workers
    (None: none to ship): those the server cannot import from its environment or PYTHONPATH
    (drainer.spark.shipped_modules)."""
    wanted = session_modules(settings) + [c for c in callables if c]
    modules = to_ship(wanted, started_python_path(settings))
    return bundle(settings.home / "spark-sessions" / "modules", modules)


def _connect(
    endpoint: str, settings: Settings, made_with: dict[str, str], shipped: Bundle | None
) -> SparkSession:
    """A Connect client: its settings are per session, the server's JVM is shared.

    Runs share one session per endpoint and version of the code, so its Python workers stay
    warm (drainer.spark.connect_session); a session the server closed is replaced. `shipped`:
    the drains' own modules, added to the session's artifacts (its identity holds their
    digest, so the session never holds another version of them).
    """
    directory = settings.home / "spark-sessions"
    remote = settings.spark_remote is not None
    server_code = known_server_code(directory, endpoint) if remote else ""
    closed: str | None = None
    replaced, measured_once = 0, False
    # the local server's token; a SPARK_REMOTE carries its own (`;token=`), if it needs one
    authenticated = endpoint if remote else client_url(endpoint, settings.connect_token)
    while True:
        url, session_id = authenticated, None
        if settings.spark_shared_session and ";session_id=" not in endpoint:
            code = session_code(settings, server_code)
            if made_with != sinks_session_conf(settings):  # a sink the drains file lacks
                code = f"{code}-{_conf_key(made_with)}"
            if shipped is not None:
                code = f"{code}-{shipped.digest}"
            session_id = shared_session_id(directory, endpoint, code, closed)
            url = with_session_id(authenticated, session_id)
        spark: SparkSession = SparkSession.builder.remote(url).create()
        try:
            spark.conf.set("spark.sql.shuffle.partitions", settings.shuffle_partitions)
            spark.conf.set(DELTA_SNAPSHOT_PARTITIONS, snapshot_partitions(settings, cores(spark)))
        except Exception as err:
            replaced += 1
            if session_id is None or replaced > MAX_CLOSED or SESSION_CLOSED not in str(err):
                raise
            log.info(
                "Spark Connect session %s was closed by the server: opening another", session_id
            )
            drop_client(spark)
            closed = session_id
            continue
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.set("spark.sql.redaction.options.regex", SPARK_REDACTION_REGEX)
        for key, value in made_with.items():  # the session's catalogs, as it is made
            spark.conf.set(key, value)
        v2_reads(spark)
        if remote and session_id is not None and not measured_once:
            measured_once = True
            tops = shipped.tops if shipped is not None else ()
            # the shipped modules are in the session's identity already (their digest)
            own = [m for m in session_modules(settings) if top_level(m) not in tops]
            measured = _server_code(spark, own)
            if measured != server_code:
                log.info("the code on %s changed: opening a session for it", redacted(endpoint))
                remember_server_code(directory, endpoint, measured)
                # leave that session to the server's idle timeout: another process may use it
                drop_client(spark)
                server_code, closed = measured, None
                continue
        if shipped is not None:
            _add_modules(spark, shipped)
        _made_at[id(spark)] = MadeAt(authenticated, directory, endpoint)
        return spark


def _add_modules(spark: SparkSession, shipped: Bundle) -> None:
    """Add the drains' modules to the session (the same name holds the same bytes: adding it
    again, from another process, is a no-op on the server).

    pyspark also puts the zip on this process's sys.path; taken off again: here the modules
    import from the user's folder as before, and a later lookup of their files (the session's
    fingerprint, the next bundle) must find the folder, not the zip."""
    entry = str(shipped.path)
    had = entry in sys.path
    spark.addArtifacts(entry, pyfile=True)
    if not had:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)


def _server_code(spark: SparkSession, modules: list[str]) -> str:
    """The fingerprint of the code the server's Python workers import, measured there."""
    from pyspark.sql import functions as F

    measure = F.udf(lambda _: code_fingerprint(modules), "string")
    row = spark.range(1).select(measure(F.lit(0))).first()
    assert row is not None  # one row in, one row out
    return str(row[0])


def session_modules(settings: Settings) -> list[str]:
    """The code a session's workers import: drainer, spark_jobs, the drains' processors."""
    modules = ["drainer", "spark_jobs"]
    try:
        for drain in load_drains(settings.config_path).values():
            modules += [drain.processor or "", drain.handler or ""]
    except DrainerError:
        pass  # the run itself reports a broken drains file
    return modules


def sinks_session_conf(settings: Settings) -> dict[str, str]:
    """What the drains file's sinks need a session made with (their catalogs' settings): set
    here, when a session is made, since sinks never change the session runs share (the
    session's catalogs are part of its identity: `_catalogs`). A drain whose catalog cannot
    be defined (a variable unset) is left out: its own run says why."""
    conf: dict[str, str] = {}
    try:
        drains = list(load_drains(settings.config_path).values())
    except DrainerError:
        return conf  # the run itself reports a broken drains file
    for drain in drains:
        with contextlib.suppress(DrainerError):
            conf.update(sink_for(drain.sink, settings).session_conf())
    return conf


def _catalogs(settings: Settings) -> str:
    """Catalogs: a session keeps the catalog it initialized first, so a different warehouse,
    database or sink catalog block must get a session of its own."""
    keys: list[str] = []
    try:
        for drain in load_drains(settings.config_path).values():
            keys.append(sink_for(drain.sink, settings).session_key())
    except DrainerError:
        pass
    return hashlib.sha256(
        "\n".join([settings.warehouse, settings.database_url, *filter(None, keys)]).encode()
    ).hexdigest()[:16]


def session_code(settings: Settings, server_code: str = "") -> str:
    """What a shared session's workers depend on: the code they import (this machine's files,
    and `server_code`, measured on a remote server), the session's settings and catalogs."""
    extra = (
        f"shuffle={settings.shuffle_partitions};server={server_code};catalogs={_catalogs(settings)}"
    )
    return code_fingerprint(session_modules(settings), extra=extra)


def _in_process(settings: Settings, made_with: dict[str, str]) -> SparkSession:
    existing = SparkSession.getActiveSession()
    if existing is not None and not is_connect(existing):
        master = existing.sparkContext.master
        if master != settings.spark_master:
            raise RuntimeError(
                f"this process already runs an in-process Spark session on {master}; one process "
                f"cannot also run one on {settings.spark_master}: start another process"
            )
        need = made_with
        if all(existing.conf.get(key, None) == value for key, value in need.items()):
            return existing
        # the same SparkContext, SQL settings of its own: made with its sinks' settings
        session = existing.newSession()
        for key, value in need.items():
            session.conf.set(key, value)
        return session
    # inherited from a parent process that used Spark Connect, this flag would make the builder
    # return a Connect client instead of the in-process session asked for
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    # workers must run this interpreter, where drainer and the user's handlers are installed
    export_spark_python_env(local_master=_loopback(settings.spark_master))
    # a table format's jars and SQL extension only when a configured drain writes that format
    formats = configured_formats(settings)
    jars = ",".join(
        str(path)
        for path in [*spark_kafka_jars(settings.home), *lakehouse_jars(settings.home, formats)]
    )
    builder = (
        SparkSession.builder.appName("drainer")
        .master(settings.spark_master)
        .config("spark.jars", jars)
        .config("spark.driver.memory", settings.spark_driver_memory)
        .config("spark.sql.shuffle.partitions", settings.shuffle_partitions)
        .config(
            DELTA_SNAPSHOT_PARTITIONS,
            snapshot_partitions(settings, local_cores(settings.spark_master)),
        )
        .config("spark.ui.enabled", str(settings.spark_ui).lower())
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        # progress bars interleave with the CLI's and Dagster's output; the UI has the detail
        .config("spark.ui.showConsoleProgress", "false")
        # SASL's generated JAAS line and inline PEM keys are secrets too (plan text, UI, logs)
        .config("spark.redaction.regex", SPARK_REDACTION_REGEX)
        .config("spark.sql.redaction.options.regex", SPARK_REDACTION_REGEX)
    )
    for key, value in {**server_conf(formats), **made_with}.items():
        builder = builder.config(key, value)
    if _loopback(settings.spark_master) and not settings.spark_master.startswith("local"):
        # a cluster on this machine: its executors call this driver back on loopback
        builder = builder.config("spark.driver.host", "127.0.0.1")
    spark = builder.getOrCreate()
    spark.conf.set("spark.sql.redaction.options.regex", SPARK_REDACTION_REGEX)
    v2_reads(spark)
    spark.sparkContext.setLogLevel(settings.spark_log_level)
    return spark


def v2_reads(spark: SparkSession) -> None:
    """Read Kafka through its DataSource V2 scan, not the V1 relation Spark picks by default.

    The V1 relation hands its rows over as external `Row`s and converts each back (a round trip
    per record, ~20% of a 1M-record run's read on the server); the V2 scan makes Spark's rows
    directly, with the same options, offsets and `failOnDataLoss`. Streaming reads use V2
    already. Measured at 1M records: a Postgres-sink run 3.57 -> 3.07 s, Delta 3.21 -> 2.67 s,
    Iceberg 2.50 -> 2.24 s (benchmarks/README.md, "Kafka reads through the V2 scan"). The
    session's other V1 sources are kept as the server has them."""
    sources = (spark.conf.get(V1_SOURCES) or "").split(",")
    kept = [s for s in sources if s.strip().lower() != KAFKA_SOURCE]
    if len(kept) != len(sources):
        spark.conf.set(V1_SOURCES, ",".join(kept))


def _loopback(master: str) -> bool:
    """A local master, or a cluster master on this machine's loopback address."""
    if master.startswith("local"):
        return True
    host = master.split("://", 1)[-1].split(":", 1)[0]
    return host in ("127.0.0.1", "localhost")
