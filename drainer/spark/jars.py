"""Which jars Spark and the local broker need, resolved through Maven into `home/jars/`.

Spark gets only the Kafka connector's delta over what the pyspark wheel already ships (no second
scala-library, spark-core, slf4j or compression codec); the broker gets Kafka plus a log4j2
binding, because the published pom of the broker leaves logging to the distribution.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
from contextlib import AbstractContextManager
from pathlib import Path

from drainer.errors import ResolutionError, ServiceError
from drainer.sinks import format_jars
from drainer.spark.lock import file_lock
from drainer.spark.maven import cached, resolve_jars

log = logging.getLogger(__name__)

SCALA = "2.13"
CONNECTOR = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA}"
TOKEN_PROVIDER = f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA}"
MAX_PATCH = 12  # patch releases considered per older minor in the fallback

KAFKA_VERSION = "4.1.1"
# Kafka 4.1.1's pom pins slf4j-api 1.7.36 and log4j-core 2.24.3 (as its binary distribution
# does), so the matching binding is the SLF4J 1.x one: log4j-slf4j-impl, not log4j-slf4j2-impl.
LOG4J_VERSION = "2.24.3"
KAFKA_BROKER = (
    f"org.apache.kafka:kafka_{SCALA}:{KAFKA_VERSION}",
    f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
    f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
)
KAFKA_TOOLS = (f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}", *KAFKA_BROKER)


def pyspark_version() -> str:
    """The installed pyspark's version, read from its metadata (pyspark is never imported)."""
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError as exc:
        raise ServiceError(
            "pyspark is not installed in this environment: pip install -e ."
        ) from exc


def spark_kafka_jars(home: Path) -> list[Path]:
    """Local jar files for `spark.jars` that give the installed pyspark the Kafka source.

    Normally the connector of exactly the pyspark version. Maven Central can lag PyPI (or a mirror
    can be partial), so when that fails we take the newest published connector of the same
    major.minor, and the newest published token provider not newer than it, and log a warning.
    """
    version = pyspark_version()
    dest = home / "jars" / f"spark-{version}"
    shipped = _shipped_artifacts()
    exact = [f"{CONNECTOR}:{version}"]
    fallback, fallback_exclusions = _fallback(version)
    fallback_exclusions = sorted({*shipped, *fallback_exclusions})
    attempts = ((exact, shipped), (fallback, fallback_exclusions))
    hit = _cached_any(attempts, dest)
    if hit is not None:
        return hit
    with _dest_lock(dest):
        hit = _cached_any(attempts, dest)  # another process may have resolved meanwhile
        if hit is not None:
            return hit
        try:
            return resolve_jars(exact, dest, shipped)
        except ResolutionError as exact_error:
            log.warning(
                "spark-sql-kafka %s is not resolvable from Maven; trying the newest %s.x",
                version,
                ".".join(version.split(".")[:2]),
            )
            try:
                jars = resolve_jars(fallback, dest, fallback_exclusions)
            except ResolutionError as fallback_error:
                raise ServiceError(
                    f"{exact_error}\n\nThe fallback to an older {version.rsplit('.', 1)[0]}.x "
                    f"connector failed too:\n{fallback_error}"
                ) from fallback_error
    spark_jars = ", ".join(j.name for j in jars if j.name.startswith("spark-"))
    log.warning("using %s with pyspark %s", spark_jars, version)
    return jars


def _cached_any(attempts: tuple[tuple[list[str], list[str]], ...], dest: Path) -> list[Path] | None:
    for coords, excl in attempts:
        hit = cached(coords, dest, excl)
        if hit is not None:
            return hit
    return None


def _dest_lock(dest: Path) -> AbstractContextManager[None]:
    """One resolution per jar directory at a time, across processes."""
    return file_lock(dest.parent / f".{dest.name}.lock")


def kafka_broker_jars(home: Path) -> list[Path]:
    """The classpath of a KRaft broker: Kafka 4.1.1 and log4j2 behind SLF4J."""
    dest = _broker_dest(home)
    with _dest_lock(dest):
        return resolve_jars(list(KAFKA_BROKER), dest)


def kafka_tool_jars(home: Path) -> list[Path]:
    """Kafka's command-line tools (kafka-consumer-groups: `ConsumerGroupCommand`), for checking
    the mirrored group offsets the way operators do. The broker's published pom leaves the tools
    out, so they live in a directory of their own (the running broker's jars stay untouched)."""
    dest = home / "jars" / f"kafka-tools-{KAFKA_VERSION}"
    with _dest_lock(dest):
        return resolve_jars(list(KAFKA_TOOLS), dest)


def kafka_broker_jars_cached(home: Path) -> bool:
    """True when the broker's jars are already resolved (no Maven run needed)."""
    return cached(list(KAFKA_BROKER), _broker_dest(home)) is not None


def _broker_dest(home: Path) -> Path:
    return home / "jars" / f"kafka-{KAFKA_VERSION}"


def _fallback(version: str) -> tuple[list[str], list[str]]:
    """Maven version sets for the newest published connector and token provider up to `version`.

    Unions of exact pins rather than ranges, because Maven sorts unknown qualifiers after the
    release (4.1.0-preview1 > 4.1.0), so a range would pick previews.
    """
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not match:
        raise ServiceError(f"cannot read the pyspark version {version!r}")
    major, minor, patch = (int(p) for p in match.groups())
    same_minor = [f"{major}.{minor}.{p}" for p in range(patch + 1)]
    older = [f"{major}.{m}.{p}" for m in range(minor) for p in range(MAX_PATCH + 1)]
    coords = [
        f"{CONNECTOR}:{_pins(same_minor)}",
        f"{TOKEN_PROVIDER}:{_pins([*older, *same_minor])}",
    ]
    return coords, [TOKEN_PROVIDER]


def _pins(versions: list[str]) -> str:
    """A Maven version set allowing exactly `versions`; Maven takes the newest it can find."""
    return ",".join(f"[{v}]" for v in versions)


def _shipped_artifacts() -> list[str]:
    """`*:artifactId` exclusions for every jar in the pyspark wheel's `jars/` directory.

    A jar name does not say where the artifactId ends and the version begins (`zstd-jni-1.5.7-6`),
    so every cut before a `-<digit>` is a candidate; the wrong ones match nothing.
    """
    try:
        jars_dir = Path(str(importlib.metadata.distribution("pyspark").locate_file("pyspark/jars")))
    except importlib.metadata.PackageNotFoundError:
        return []
    names: set[str] = set()
    for jar in jars_dir.glob("*.jar"):
        stem = jar.name[: -len(".jar")]
        for i, ch in enumerate(stem[:-1]):
            if ch == "-" and stem[i + 1].isdigit() and i > 0:
                names.add(f"*:{stem[:i]}")
    return sorted(names)


def lakehouse_jars(home: Path, formats: tuple[str, ...]) -> list[Path]:
    """Local jars for the table formats `formats` (their sinks' capabilities name them),
    resolved through Maven once into `home/jars/<format>-<version>`.

    Like the Kafka connector: only what the pyspark wheel does not already ship.
    """
    shipped = _shipped_artifacts()
    found: list[Path] = []
    for folder, coords in format_jars(formats).items():
        dest = home / "jars" / folder
        hit = cached(list(coords), dest, shipped)
        if hit is None:
            with _dest_lock(dest):
                hit = resolve_jars(list(coords), dest, shipped)
        found += hit
    return found
