"""A broker killed for a test, and waited for until a new one can start in its place."""

from __future__ import annotations

import os
import signal
import time

from drainer.services import process
from drainer.services.kafka_config import listener_ports
from drainer.settings import Settings
from drainer.spark.net import host_port, port_open


def kill_broker(pid: int, settings: Settings, within_s: float = 60.0) -> None:
    """`kill -9` the broker `pid` of `settings`, then wait until its process and every one of its
    listeners are gone: they close a moment after the process, one by one (a dying JVM's threads
    still hold its sockets while its main thread shows dead), and `kafka.up` refuses a port still
    held (the suite once met the controller's, 9093)."""
    os.kill(pid, signal.SIGKILL)
    host, port = host_port(settings.bootstrap_servers, 9092)
    gone = time.monotonic() + within_s
    while process.is_alive(pid) or any(port_open(host, p) for p in listener_ports(port)):
        assert time.monotonic() < gone, f"the killed broker {pid} still holds its ports"
        time.sleep(0.1)
