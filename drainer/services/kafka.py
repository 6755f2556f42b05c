"""The local single-node KRaft broker, or a check that the configured broker answers.

`up` is idempotent: a broker we started (pid file + live process) is reused, a broker somebody
else runs on the port is used as is, and only a free port gets a new broker. Data survives `stop`.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from drainer.errors import ServiceError
from drainer.services import process
from drainer.services.kafka_config import KafkaPaths, cluster_id, listener_ports, write_configs
from drainer.services.kafka_tls import ensure_credentials, upsert_scram_user
from drainer.services.status import ServiceStatus
from drainer.settings import Settings
from drainer.spark.jars import kafka_broker_jars, kafka_broker_jars_cached
from drainer.spark.net import host_port, port_open
from drainer.spark.tools import require

NAME = "kafka"
MARKER = "kafka.Kafka"  # on the broker's command line; tells our pid from a reused one
START_TIMEOUT_SECONDS = 60.0
JVM_HEAP = ("-Xms256m", "-Xmx1g")

Echo = Callable[[str], None]


def up(settings: Settings, echo: Echo = print) -> ServiceStatus:
    """Make the broker answer at the bootstrap address, starting ours if the port is free."""
    if not settings.local_kafka:
        return _check_remote(settings.bootstrap_servers)
    host, port = host_port(settings.bootstrap_servers, 9092)
    address = f"{host}:{port}"
    paths = KafkaPaths.under(settings.home)
    pid = process.our_pid(paths.pid_file, MARKER)
    if pid is not None:
        _wait_ready(address, paths, pid, proc=None)
        upsert_scram_user(address, ensure_credentials(paths.tls, host))
        return ServiceStatus(NAME, True, address, pid, "already running")
    paths.pid_file.unlink(missing_ok=True)
    if port_open(host, port):
        if answers(address):
            echo(f"{NAME:<9} a broker not started by drainer answers at {address}; using it")
            return ServiceStatus(NAME, True, address, None, "not started by drainer")
        raise ServiceError(
            f"port {port} is in use by another process; stop it or set "
            "KAFKA_BOOTSTRAP_SERVERS to a broker"
        )
    for other in listener_ports(port)[1:]:
        if port_open(host, other):
            raise ServiceError(
                f"port {other} (one of the local broker's ports {listener_ports(port)}: "
                "controller, SASL, SSL) is in use by another process; stop it, choose another "
                "DRAINER_KAFKA_PORT, or set KAFKA_BOOTSTRAP_SERVERS to a broker"
            )
    java = require("java")
    if not kafka_broker_jars_cached(settings.home):
        echo(f"{NAME:<9} resolving broker jars with Maven (first time only)")
    jars = kafka_broker_jars(settings.home)
    classpath = ":".join(str(jar) for jar in jars)
    creds = ensure_credentials(paths.tls, host)
    write_configs(paths, host, port, creds)
    if not paths.formatted:
        _format(java, classpath, paths)
    echo(f"{NAME:<9} starting at {address} (SASL_PLAINTEXT :{port + 2}, SSL :{port + 3})")
    proc = _start(java, classpath, paths)
    _wait_ready(address, paths, proc.pid, proc)
    upsert_scram_user(address, creds)
    return ServiceStatus(NAME, True, address, proc.pid, "started")


def stop(settings: Settings, echo: Echo = print) -> ServiceStatus:
    """Stop the broker we started (SIGTERM, then SIGKILL after 30 s); keep its data."""
    host, port = host_port(settings.bootstrap_servers, 9092)
    address = f"{host}:{port}"
    if not settings.local_kafka:
        return ServiceStatus(NAME, answers(address), address, None, "not ours to stop")
    paths = KafkaPaths.under(settings.home)
    pid = process.our_pid(paths.pid_file, MARKER)
    if pid is None:
        paths.pid_file.unlink(missing_ok=True)
        return ServiceStatus(NAME, port_open(host, port), address, None, "not started by drainer")
    echo(f"{NAME:<9} stopping pid {pid}")
    killed = process.terminate(pid)
    paths.pid_file.unlink(missing_ok=True)
    return ServiceStatus(NAME, False, address, None, "killed" if killed else "stopped")


def status(settings: Settings) -> ServiceStatus:
    """Whether the broker answers, and whether it is the one we started."""
    host, port = host_port(settings.bootstrap_servers, 9092)
    address = f"{host}:{port}"
    if not settings.local_kafka:
        ok = answers(address)
        return ServiceStatus(NAME, ok, address, None, "external" if ok else "not reachable")
    pid = process.our_pid(KafkaPaths.under(settings.home).pid_file, MARKER)
    if pid is not None:
        ok = port_open(host, port)
        return ServiceStatus(NAME, ok, address, pid, "" if ok else "starting or hung")
    if port_open(host, port):
        ok = answers(address)
        return ServiceStatus(
            NAME, ok, address, None, "not started by drainer" if ok else "port taken, not Kafka"
        )
    return ServiceStatus(NAME, False, address, None, "stopped")


def answers(bootstrap: str, timeout: float = 5.0) -> bool:
    """True when a Kafka broker returns cluster metadata within `timeout` seconds."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return True


def _check_remote(bootstrap: str) -> ServiceStatus:
    """KAFKA_BOOTSTRAP_SERVERS was given: never start anything, only check it answers."""
    if not answers(bootstrap, timeout=10.0):
        raise ServiceError(
            f"Kafka at {bootstrap} (KAFKA_BOOTSTRAP_SERVERS) did not answer within 10 s; "
            "check the address, or unset KAFKA_BOOTSTRAP_SERVERS to run a local broker"
        )
    return ServiceStatus(NAME, True, bootstrap, None, "external")


def _format(java: str, classpath: str, paths: KafkaPaths) -> None:
    """Format KRaft storage once; the cluster id is kept so a restart never re-formats."""
    cmd = [
        java,
        "-cp",
        classpath,
        f"-Dlog4j2.configurationFile={paths.log4j}",
        "kafka.tools.StorageTool",
        "format",
        f"--cluster-id={cluster_id(paths)}",  # one argument, even for an id stored with a dash
        "--config",
        str(paths.properties),
        "--ignore-formatted",
    ]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0 or not paths.formatted:
        raise ServiceError(f"formatting Kafka storage in {paths.data} failed:\n{done.stdout}")


def _start(java: str, classpath: str, paths: KafkaPaths) -> subprocess.Popen[bytes]:
    """Launch the broker detached from our session, so it outlives this process."""
    cmd = [
        java,
        *JVM_HEAP,
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={paths.log4j}",
        f"-Dkafka.logs.dir={paths.root}",
        f"-Djava.io.tmpdir={paths.scratch}",
        "-cp",
        classpath,
        MARKER,
        str(paths.properties),
    ]
    process.fresh_scratch(paths.scratch)  # the last broker's: it is gone
    with paths.console_log.open("ab") as out:
        proc = subprocess.Popen(
            process.with_default_signals(cmd),
            cwd=paths.root,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    process.write_pid(paths.pid_file, proc.pid)
    return proc


_children: dict[int, subprocess.Popen[bytes]] = {}  # keeps Popen objects from warning on GC


def _wait_ready(
    address: str, paths: KafkaPaths, pid: int, proc: subprocess.Popen[bytes] | None
) -> None:
    """Wait until the port accepts connections and the broker serves metadata."""
    host, port = host_port(address, 9092)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        gone, exited = process.exit_status(proc, pid, MARKER)
        if gone:
            paths.pid_file.unlink(missing_ok=True)
            raise ServiceError(f"the Kafka broker exited (code {exited}).\n{_logs(paths)}")
        if port_open(host, port) and answers(address, timeout=3.0):
            return
        time.sleep(0.5)
    process.terminate(pid)
    paths.pid_file.unlink(missing_ok=True)
    raise ServiceError(
        f"the Kafka broker did not answer at {address} within {START_TIMEOUT_SECONDS:.0f} s; "
        f"stopped it.\n{_logs(paths)}"
    )


def _logs(paths: KafkaPaths) -> str:
    return process.last_lines(paths.server_log, 30, paths.console_log, 15)
