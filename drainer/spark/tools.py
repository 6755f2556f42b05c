"""Finding the external programs the stack needs, with an install hint when one is missing."""

from __future__ import annotations

import shutil

from drainer.errors import ServiceError

JAVA_MAVEN_HINT = "apt-get install maven openjdk-17-jdk-headless"


def require(program: str, install_hint: str = JAVA_MAVEN_HINT) -> str:
    """The absolute path of `program` on PATH, or a ServiceError saying how to install it."""
    path = shutil.which(program)
    if path is None:
        raise ServiceError(f"`{program}` was not found on PATH; install it: {install_hint}")
    return path
