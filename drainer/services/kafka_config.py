"""The files of the local broker: where they live and what they say.

Rewritten on every start from the settings, so a changed port or a hand-edited file never drifts
from what `services up` believes (and a broker formatted before a listener was added gets it on its
next start); only the data directory, the cluster id and the TLS/SCRAM credentials are kept.

Four listeners on loopback, from the PLAINTEXT port `p` (`DRAINER_KAFKA_PORT`, 9092):
`p` PLAINTEXT, `p+1` the KRaft controller, `p+2` SASL_PLAINTEXT with SCRAM-SHA-512, `p+3` SSL
with client certificates required (mutual TLS), so secured clusters can be tried locally.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from drainer.services.kafka_tls import LocalCredentials

CONTROLLER_OFFSET, SASL_OFFSET, SSL_OFFSET = 1, 2, 3


@dataclass(frozen=True)
class KafkaPaths:
    """Everything the local broker keeps under `home/kafka/`."""

    root: Path

    @classmethod
    def under(cls, home: Path) -> KafkaPaths:
        return cls(home / "kafka")

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def properties(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.xml"

    @property
    def scratch(self) -> Path:
        """The broker's `java.io.tmpdir`: the native codecs it unpacks (lz4, snappy, zstd) stay
        behind when it is killed, so each start empties it rather than /tmp filling up."""
        return self.root / "tmp"

    @property
    def server_log(self) -> Path:
        return self.root / "server.log"

    @property
    def console_log(self) -> Path:
        return self.root / "console.log"

    @property
    def pid_file(self) -> Path:
        return self.root / "kafka.pid"

    @property
    def tls(self) -> Path:
        return self.root / "tls"

    @property
    def cluster_id_file(self) -> Path:
        return self.root / "cluster.id"

    @property
    def formatted(self) -> bool:
        """KRaft storage is formatted once; meta.properties is the tool's own marker."""
        return (self.data / "meta.properties").is_file()


def cluster_id(paths: KafkaPaths) -> str:
    """The stored cluster id, created once (Kafka's Uuid form: url-safe base64 of 16 bytes)."""
    try:
        stored = paths.cluster_id_file.read_text().strip()
        if stored:
            return stored
    except FileNotFoundError:
        pass
    new = "-"
    while new.startswith("-"):  # as Kafka's own Uuid.randomUuid: a leading dash reads as a flag
        new = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.cluster_id_file.write_text(new + "\n")
    return new


def listener_ports(port: int) -> list[int]:
    """Every port the local broker listens on, PLAINTEXT first."""
    return [port, port + CONTROLLER_OFFSET, port + SASL_OFFSET, port + SSL_OFFSET]


def write_configs(paths: KafkaPaths, host: str, port: int, creds: LocalCredentials) -> None:
    """server.properties for a one-node KRaft broker+controller on loopback, and its log4j2."""
    paths.data.mkdir(parents=True, exist_ok=True)
    controller, sasl, ssl = port + CONTROLLER_OFFSET, port + SASL_OFFSET, port + SSL_OFFSET
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        # a static voter set: no quorum state to re-bootstrap if the port ever changes
        "controller.quorum.voters": f"1@{host}:{controller}",
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller},"
        f"SASL_PLAINTEXT://{host}:{sasl},SSL://{host}:{ssl}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port},SASL_PLAINTEXT://{host}:{sasl},"
        f"SSL://{host}:{ssl}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL",
        # SASL_PLAINTEXT: SCRAM users live in the cluster metadata (`services up` adds one)
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        # SSL: PEM key and certificates made by kafka_tls, client certificates required
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(creds.server_keystore),
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": str(creds.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "log.dirs": str(paths.data),
        "num.partitions": "4",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # the drainer creates its level topics explicitly; a typo must not create a topic
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        # backlogs in tests carry old event timestamps; time retention would delete them
        "log.retention.ms": "-1",
    }
    body = "".join(f"{key}={value}\n" for key, value in props.items())
    paths.properties.write_text(
        "# generated by drainer.services; rewritten on every start\n" + body
    )
    paths.log4j.write_text(_LOG4J2.format(log=escape(str(paths.server_log)), pattern=_PATTERN))


_PATTERN = "[%d] %p %m (%c)%n"
_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<!-- generated by drainer.services: INFO to {log}, only warnings on the console -->
<Configuration status="WARN">
  <Appenders>
    <Console name="console" target="SYSTEM_OUT">
      <ThresholdFilter level="WARN" onMatch="ACCEPT" onMismatch="DENY"/>
      <PatternLayout pattern="{pattern}"/>
    </Console>
    <RollingFile name="server" fileName="{log}" filePattern="{log}.%i">
      <PatternLayout pattern="{pattern}"/>
      <SizeBasedTriggeringPolicy size="50 MB"/>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="kafka.authorizer.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Root level="INFO">
      <AppenderRef ref="console"/>
      <AppenderRef ref="server"/>
    </Root>
  </Loggers>
</Configuration>
"""
