"""Sinks: where a drain's output lands, one module per format behind one interface.

`sink_for(config, settings)` is the registry, keyed by the configuration's `type`; the run asks
the sink it returns, never which format it is (drainer.sinks.base says what a sink promises).
The Spark half of each format lives in `spark_jobs/sinks/`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drainer.config import DrainConfig, load_drains
from drainer.config.formats import DECODER_JARS
from drainer.config.sink_models import SINK_MODELS
from drainer.errors import DrainerError, ServiceError
from drainer.settings import Settings
from drainer.sinks.base import Capabilities, ServerJar, Sink, SinkCommit, TableSink, UpkeepReport
from drainer.sinks.delta import DeltaSink
from drainer.sinks.iceberg import IcebergSink
from drainer.sinks.kafka import KafkaSink
from drainer.sinks.postgres import PostgresSink
from drainer.sinks.routed import routed_class, router

SINKS: dict[str, type[Sink[Any]]] = {
    PostgresSink.type: PostgresSink,
    DeltaSink.type: DeltaSink,
    IcebergSink.type: IcebergSink,
    KafkaSink.type: KafkaSink,
}
assert set(SINKS) == set(SINK_MODELS), "every configurable sink type has a sink"


def sink_for(config: Any, settings: Settings, drain: str = "") -> Sink[Any]:
    """The sink a drain's `sink:` block configures (`drain`: its name, which a routed sink's
    tables are registered under; drainer.sinks.routed)."""
    single = SINKS[config.type]
    if router(config) is not None:
        return routed_class(single)(config, settings, drain)
    return single(config, settings)


def spark_formats(drains: Iterable[DrainConfig]) -> tuple[str, ...]:
    """The sink types among `drains` that the Spark server needs jars for, in a fixed order,
    then the record formats it needs jars to decode (`avro`)."""
    drains = list(drains)
    used = {d.sink.type for d in drains}
    decoded = {f.format for d in drains for f in (d.value, d.key) if f is not None}
    return tuple(t for t, cls in SINKS.items() if t in used and cls.capabilities.jars) + tuple(
        f for f in DECODER_JARS if f in decoded
    )


def configured_formats(settings: Settings) -> tuple[str, ...]:
    """The formats the drains file needs; none when it cannot be read (its runs say why)."""
    try:
        return spark_formats(load_drains(settings.config_path).values())
    except DrainerError:
        return ()


def server_conf(formats: Iterable[str]) -> dict[str, str]:
    """Static Spark settings a session needs for `formats` (set when the JVM starts)."""
    caps = [SINKS[f].capabilities for f in formats if f in SINKS]
    extensions = [c.spark_extension for c in caps if c.spark_extension]
    conf = {"spark.sql.extensions": ",".join(extensions)} if extensions else {}
    for c in caps:
        conf.update(c.spark_conf)
    return conf


def format_jars(formats: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Maven coordinates per format, keyed `<format>-<version>` (where they are cached)."""
    out = {}
    for f in formats:
        jars = SINKS[f].capabilities.jars if f in SINKS else DECODER_JARS[f]
        out[f"{f}-{jars[0].rsplit(':', 1)[-1]}"] = jars
    return out


@dataclass
class ServerCode:
    """What the sinks run in the Spark server's JVM, for the server's start: the class path,
    its conf, each sink's jar by type (`-`: none here) and why a sink has none."""

    classpath: list[Path] = field(default_factory=list)
    conf: dict[str, str] = field(default_factory=dict)
    jars: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def server_code(home: Path, spark_jars: Sequence[Path]) -> ServerCode:
    """Every sink's code for the server's JVM (`capabilities.server_code`), built as needed;
    a sink that cannot have it here works without it and says why (`problems`)."""
    code = ServerCode()
    for kind, cls in SINKS.items():
        if not cls.capabilities.server_code:
            continue
        jar: ServerJar | None = None
        try:
            jar = cls.server_jar(home, spark_jars)
        except ServiceError as err:
            code.problems.append(str(err))
        code.jars[kind] = jar.name if jar else "-"
        if jar is not None:
            code.classpath += [p for p in jar.classpath if p not in code.classpath]
            code.conf.update(jar.conf)
    return code


__all__ = [
    "SINKS",
    "Capabilities",
    "ServerCode",
    "ServerJar",
    "Sink",
    "SinkCommit",
    "TableSink",
    "UpkeepReport",
    "configured_formats",
    "format_jars",
    "server_code",
    "server_conf",
    "sink_for",
    "spark_formats",
]
