"""Address parsing and TCP probes, the cheapest way to tell whether something listens."""

from __future__ import annotations

import socket


def host_port(address: str, default_port: int) -> tuple[str, int]:
    """Split `host:port` (also `[v6]:port`); the first entry of a comma-separated list."""
    first = address.split(",")[0].strip()
    for prefix in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://"):
        first = first.removeprefix(prefix)
    if first.startswith("["):
        host, _, rest = first[1:].partition("]")
        port = rest.lstrip(":")
        return host, int(port) if port else default_port
    host, sep, port = first.rpartition(":")
    if not sep:
        return first, default_port
    return host, int(port)


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a TCP connect to host:port succeeds within `timeout` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
