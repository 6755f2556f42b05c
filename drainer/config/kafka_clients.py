"""One `kafka:` block, two Kafka clients: translate the common settings for each, keep secrets out.

A drain's `kafka:` block holds the settings every secured cluster needs, in librdkafka's names:
`security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location` (a PEM
file), `ssl.certificate.location` + `ssl.key.location` (PEM, mutual TLS), `ssl.key.password`,
`ssl.endpoint.identification.algorithm` and `client.id`. librdkafka (planning, producing,
mirroring) takes them as they are; Spark's Java client gets a generated `sasl.jaas.config`, a
PEM truststore (`ssl.truststore.type=PEM`) and a PEM keystore made from the certificate and key
files. Extras go in `kafka_librdkafka:` and `kafka_java:`, each client's own names.

Values may reference environment variables (`${KAFKA_PASSWORD}`), expanded when a client is
configured, never at load; a leading `~` in a file setting (`*.location`) is the home
directory, as the shell reads it. Every expanded secret is remembered so that `redact` can
blank it out of any text: error messages, log lines, librdkafka's log.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drainer.errors import ConfigError, RedactedError
from drainer.local_secrets import secrets_read
from drainer.settings import environment_secrets, expand_env_references

COMMON_KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "client.id",
    # read_committed (the default) or read_uncommitted: both clients' consumers
    "isolation.level",
)
MANAGED_KEYS = ("bootstrap.servers", "group.id", "enable.auto.commit")
# options Spark's Kafka source manages itself and refuses (its docs, "Kafka Specific Configurations")
SPARK_MANAGED_KEYS = (
    "auto.offset.reset",
    "key.deserializer",
    "value.deserializer",
    "interceptor.classes",
    "enable.auto.commit",
    "group.id",
)
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# a setting whose name matches is a secret: its value is redacted wherever it could show
SECRET_NAME = re.compile(r"password|secret|jaas|token|ssl\.keystore\.key$|\.key\.pem$", re.I)
# Spark redacts option and conf values whose names match (plan text, UI, event log)
SPARK_REDACTION_REGEX = (
    r"(?i)secret|password|token|access[.]?key|url|sasl\.jaas\.config|ssl\.keystore\.key"
)

_secrets: set[str] = set()
_secrets_lock = threading.Lock()


def check_blocks(
    common: Mapping[str, Any], librdkafka: Mapping[str, Any], java: Mapping[str, Any]
) -> None:
    """Load-time checks of the three blocks; ValueError names `block.setting` and the fix."""
    for block, settings in (
        ("kafka", common),
        ("kafka_librdkafka", librdkafka),
        ("kafka_java", java),
    ):
        for key, value in settings.items():
            if key in MANAGED_KEYS:
                raise ValueError(
                    f"{block}.{key} is managed by drainer: remove it "
                    "(bootstrap servers come from KAFKA_BOOTSTRAP_SERVERS)"
                )
            if not isinstance(value, str | int | float | bool):
                raise ValueError(
                    f"{block}.{key} must be a single value, not {type(value).__name__}"
                )
    for key in common:
        if key not in COMMON_KEYS:
            home = "kafka_java" if _java_only(key) else "kafka_librdkafka"
            raise ValueError(
                f"kafka.{key} is not one of the common settings ({', '.join(COMMON_KEYS)}): "
                f"a client-specific setting belongs in `{home}:`"
            )
    for key, value in librdkafka.items():
        problem = _librdkafka_rejects(key, value)
        if problem:
            if key in COMMON_KEYS:
                where = "it is a common setting: put it in `kafka:`"
            elif _java_only(key):
                where = "a Java client setting belongs in `kafka_java:`"
            else:
                where = "fix the value"
            raise ValueError(f"kafka_librdkafka.{key}: librdkafka rejects it ({problem}); {where}")
    for key in java:
        if key.startswith("kafka."):
            raise ValueError(f"kafka_java.{key}: write it without the `kafka.` prefix")
        if key in COMMON_KEYS:
            raise ValueError(f"kafka_java.{key} is a common setting: put it in `kafka:`")
        if key in SPARK_MANAGED_KEYS:
            raise ValueError(f"kafka_java.{key} is managed by Spark's Kafka source: remove it")
    _check_common(common)


def _check_common(common: Mapping[str, Any]) -> None:
    protocol = str(common.get("security.protocol", "PLAINTEXT"))
    if "${" not in protocol and protocol.upper() not in PROTOCOLS:
        raise ValueError(
            f"kafka.security.protocol '{protocol}' must be one of {', '.join(PROTOCOLS)}"
        )
    has_user = "sasl.username" in common or "sasl.password" in common
    if has_user and not ("sasl.username" in common and "sasl.password" in common):
        raise ValueError("kafka.sasl.username and kafka.sasl.password go together: set both")
    mechanism = str(common.get("sasl.mechanism", "")).upper()
    if has_user and mechanism not in JAAS_MODULES:
        raise ValueError(
            f"kafka.sasl.username/password need `sasl.mechanism` {', '.join(JAAS_MODULES)} "
            f"(got '{mechanism or 'none'}'); other mechanisms are configured per client in "
            "`kafka_librdkafka:` and `kafka_java:` (e.g. sasl.jaas.config)"
        )
    if has_user and not protocol.upper().startswith("SASL_"):
        raise ValueError(
            "kafka.sasl.username is set but kafka.security.protocol is "
            f"'{protocol}': use SASL_SSL (or SASL_PLAINTEXT on a trusted network)"
        )
    if ("ssl.certificate.location" in common) != ("ssl.key.location" in common):
        raise ValueError(
            "mutual TLS needs both kafka.ssl.certificate.location and kafka.ssl.key.location"
        )


def _librdkafka_rejects(key: str, value: Any) -> str | None:
    """librdkafka's own verdict on one setting (the only complete list of its settings)."""
    if "${" in str(value):  # a reference: only the name can be checked before it is expanded
        return _librdkafka_refusal(key, "") if _java_only(key) else None
    return _librdkafka_refusal(key, value)


def _librdkafka_refusal(key: str, value: Any) -> str | None:
    from confluent_kafka import KafkaException, Producer

    try:
        Producer({key: value, "log_level": 0})
    except KafkaException as err:
        return redact(err.args[0].str())
    except (TypeError, ValueError) as err:
        return redact(str(err))
    return None


def _java_only(key: str) -> bool:
    """librdkafka does not know the name, or refuses it as Java's (JAAS, trust/key stores)."""
    refusal = _librdkafka_refusal(key, "") or ""
    return "No such configuration property" in refusal or "Java" in refusal


def _expand(block: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    expanded: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, str):
            text, missing = expand_env_references(value)
            if missing:
                raise ConfigError(
                    f"{block}.{key} references ${{{missing[0]}}}, which is not set: export it "
                    "in the environment of drainer, Dagster and the Spark driver"
                )
            value = text
            if key.endswith(".location"):  # neither librdkafka nor Java expands `~`
                value = os.path.expanduser(value)
        if SECRET_NAME.search(key) and isinstance(value, str) and value:
            remember_secret(value)
        expanded[key] = value
    return expanded


def own_cluster_settings(block: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """A sink's own cluster block (`sink.kafka:`) for librdkafka: `${NAME}` expanded, secrets
    remembered for `redact`, the SASL mechanism upper-cased as the drain's block is."""
    own = _expand(block, settings)
    if "sasl.mechanism" in own:
        own["sasl.mechanism"] = str(own["sasl.mechanism"]).upper()
    own.pop("isolation.level", None)
    return own


def librdkafka_settings(drain: Any) -> dict[str, Any]:
    """The drain's settings for librdkafka: the common block as is, then its own extras."""
    common = _expand("kafka", drain.kafka)
    if "sasl.mechanism" in common:
        common["sasl.mechanism"] = str(common["sasl.mechanism"]).upper()
    common.pop(
        "isolation.level", None
    )  # a consumer setting: drainer.kafka.clients's consumers add it
    return {**common, **_expand("kafka_librdkafka", drain.kafka_librdkafka)}


def java_settings(drain: Any) -> dict[str, str]:
    """The drain's settings for Spark's Java client (no `kafka.` prefix), as strings."""
    common = _expand("kafka", drain.kafka)
    out: dict[str, str] = {}
    out["isolation.level"] = str(common.get("isolation.level", "read_committed"))
    for key in ("security.protocol", "client.id"):
        if key in common:
            out[key] = str(common[key]).upper() if key == "security.protocol" else str(common[key])
    if "sasl.mechanism" in common:
        out["sasl.mechanism"] = str(common["sasl.mechanism"]).upper()
    if "sasl.username" in common:
        module = JAAS_MODULES[out["sasl.mechanism"]]
        out["sasl.jaas.config"] = (
            f"{module} required username={_jaas_quote(str(common['sasl.username']))} "
            f"password={_jaas_quote(str(common['sasl.password']))};"
        )
        remember_secret(out["sasl.jaas.config"])
    if "ssl.ca.location" in common:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = str(common["ssl.ca.location"])
    if "ssl.certificate.location" in common:
        # inline PEM: the files need not exist on the executors, only where the driver runs
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.certificate.chain"] = _pem(common, "ssl.certificate.location")
        out["ssl.keystore.key"] = _pem(common, "ssl.key.location", private=True)
        remember_secret(out["ssl.keystore.key"])
    if "ssl.key.password" in common:
        out["ssl.key.password"] = str(common["ssl.key.password"])
    if "ssl.endpoint.identification.algorithm" in common:
        algorithm = str(common["ssl.endpoint.identification.algorithm"])
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
    out.update({k: str(v) for k, v in _expand("kafka_java", drain.kafka_java).items()})
    return out


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _pem(common: Mapping[str, Any], key: str, *, private: bool = False) -> str:
    path = Path(str(common[key])).expanduser()
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"kafka.{key}: cannot read {path} ({err.strerror})") from None
    if private and ("BEGIN RSA PRIVATE KEY" in text or "BEGIN EC PRIVATE KEY" in text):
        raise ConfigError(
            f"kafka.{key}: {path} is a PKCS#1/SEC1 key, which Java's PEM keystore cannot read; "
            f"convert it once with `openssl pkcs8 -topk8 -nocrypt -in {path} -out key.pk8.pem`"
        )
    return text


def remember_secret(value: str) -> None:
    with _secrets_lock:
        _secrets.add(value)


def known_secrets() -> list[str]:
    """Every secret drainer knows in this process: those the Kafka settings expanded, the
    database password and the local Connect server's token; longest first, so that none is
    left half-starred, and never one so short ("a") that it would star text everywhere."""
    known = environment_secrets() | secrets_read()
    with _secrets_lock:
        known |= _secrets
    return sorted((s for s in known if len(s) >= 4), key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    """`text` with every secret drainer knows in this process (or `secrets`) replaced by
    `***`."""
    for secret in known_secrets() if secrets is None else secrets:
        text = text.replace(secret, "***")
    return text


def redacted_error(err: BaseException) -> RedactedError:
    """`err` as a RedactedError: `Type: message` of it and of each exception it chains
    (`raise ... from`, or raised while handling), each redacted, outermost first."""
    lines: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        lines.append(f"{'' if not lines else 'caused by '}{type(current).__name__}: {current}")
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return RedactedError(redact("\n".join(lines)))


def expanded(block: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """A settings block with its `${NAME}` references read from the environment; secret
    values are remembered so that `redact` blanks them out of any text printed later."""
    return _expand(block, settings)
