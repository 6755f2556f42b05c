"""Where a run's Spark Connect server is and how a client names it: the endpoint, the token.

Runtime plumbing (spark_jobs.session uses it for every run), kept apart from the local
development stack that starts a server (drainer.services.connect).
"""

from __future__ import annotations

import re
from urllib.parse import urlparse

from drainer.errors import ServiceError
from drainer.settings import DEFAULT_CONNECT_PORT
from drainer.spark.connect_session import with_param

TOKEN_PARAM = re.compile(r"(;token=)[^;]*")


def endpoint_port(endpoint: str) -> tuple[str, int]:
    """Host and port of `sc://host:port/;params` (the port defaults to 15002)."""
    parsed = urlparse(endpoint)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise ServiceError(
            f"SPARK_REMOTE {endpoint!r} is not a Spark Connect URL: use sc://host:port"
        )
    return parsed.hostname, parsed.port or DEFAULT_CONNECT_PORT


def client_url(address: str, token: str | None) -> str:
    """How a client reaches a server drainer started (`address`, as `start` returns it): with
    the token, for SPARK_REMOTE or `SparkSession.builder.remote`."""
    return with_param(address, "token", token) if token else address


def redacted(endpoint: str) -> str:
    """An endpoint fit for logs and messages: its `token=` parameter starred out."""
    return TOKEN_PARAM.sub(r"\1***", endpoint)
