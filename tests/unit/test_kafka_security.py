"""One `kafka:` block translated for librdkafka and for Spark's Java client; secrets stay out."""

from __future__ import annotations

import pytest
import yaml

from drainer.config import load_drains
from drainer.config.kafka_clients import java_settings, librdkafka_settings, redact
from drainer.errors import ConfigError
from drainer.settings import load_settings

BASE = {"topic": "orders", "group": "billing", "levels": 3, "budget": 70, "sink": {"table": "out"}}
SCRAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "scram-sha-512",
    "sasl.username": "drainer",
    "sasl.password": "${TEST_KAFKA_PASSWORD}",
    "ssl.ca.location": "/etc/kafka/ca.pem",
}


def drain(tmp_path, **blocks):
    path = tmp_path / "drains.yaml"
    path.write_text(yaml.safe_dump({"drains": {"orders": {**BASE, **blocks}}}))
    return load_drains(path)["orders"]


def test_scram_for_both_clients_with_the_password_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_KAFKA_PASSWORD", 'p"a\\ss-1')
    d = drain(tmp_path, kafka=SCRAM, kafka_librdkafka={"socket.keepalive.enable": True})
    assert librdkafka_settings(d) == {
        **SCRAM,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.password": 'p"a\\ss-1',
        "socket.keepalive.enable": True,
    }
    java = java_settings(d)
    assert java == {
        "isolation.level": "read_committed",  # the default: transactional records as committed
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="drainer" password="p\\"a\\\\ss-1";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
    }
    assert redact(f'error: {java["sasl.jaas.config"]} and p"a\\ss-1') == "error: *** and ***"
    assert 'p"a' not in repr(d)  # the blocks are kept out of the drain's repr


def test_plain_mechanism_uses_the_plain_login_module(tmp_path):
    d = drain(
        tmp_path,
        kafka={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "pw",
        },
    )
    assert java_settings(d)["sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
    )


def test_mutual_tls_inlines_the_pem_files_for_java(tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nBBB\n-----END PRIVATE KEY-----\n")
    common = {
        "security.protocol": "SSL",
        "ssl.ca.location": "/ca.pem",
        "ssl.certificate.location": str(cert),
        "ssl.key.location": str(key),
        "ssl.endpoint.identification.algorithm": "none",
    }
    d = drain(tmp_path, kafka=common, kafka_java={"request.timeout.ms": 60000})
    java = java_settings(d)
    assert java["ssl.keystore.type"] == "PEM"
    assert java["ssl.keystore.certificate.chain"] == cert.read_text()
    assert java["ssl.keystore.key"] == key.read_text()
    assert java["ssl.endpoint.identification.algorithm"] == ""
    assert java["request.timeout.ms"] == "60000"
    assert redact(key.read_text()) == "***"
    key.write_text("-----BEGIN RSA PRIVATE KEY-----\nBBB\n-----END RSA PRIVATE KEY-----\n")
    with pytest.raises(ConfigError, match="openssl pkcs8 -topk8"):
        java_settings(d)


def test_an_unset_variable_names_the_setting_and_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_KAFKA_PASSWORD", raising=False)
    d = drain(tmp_path, kafka=SCRAM)  # loads: references are expanded when a client starts
    with pytest.raises(ConfigError, match=r"kafka.sasl.password references \$\{TEST_KAFKA"):
        librdkafka_settings(d)


@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        ({"kafka_librdkafka": {"sasl.jaas.config": "x"}}, "belongs in `kafka_java:`"),
        ({"kafka_librdkafka": {"ssl.truststore.location": "/x"}}, "kafka_librdkafka.ssl.trust"),
        ({"kafka_librdkafka": {"socket.keepalive.enable": "maybe"}}, "Expected bool value"),
        ({"kafka": {"socket.keepalive.enable": True}}, "belongs in `kafka_librdkafka:`"),
        ({"kafka": {"sasl.jaas.config": "x"}}, "belongs in `kafka_java:`"),
        ({"kafka_java": {"sasl.mechanism": "PLAIN"}}, "put it in `kafka:`"),
        ({"kafka_java": {"kafka.retries": 1}}, "without the `kafka.` prefix"),
        ({"kafka_java": {"group.id": "g"}}, "managed by drainer"),
        ({"kafka_java": {"key.deserializer": "x"}}, "managed by Spark"),
        ({"kafka": {"sasl.username": "u", "sasl.password": "p"}}, "need `sasl.mechanism`"),
        ({"kafka": {"security.protocol": "TLS"}}, "must be one of"),
        ({"kafka": {"ssl.key.location": "/k"}}, "needs both"),
    ],
)
def test_a_setting_in_the_wrong_block_is_a_config_error(tmp_path, blocks, message):
    with pytest.raises(ConfigError) as info:
        drain(tmp_path, **blocks)
    assert message in str(info.value)


def test_isolation_level_is_common_and_a_consumer_setting_for_librdkafka(tmp_path):
    from drainer.kafka.clients import client_config, consumer_config

    default = drain(tmp_path)
    assert java_settings(default)["isolation.level"] == "read_committed"
    assert (
        consumer_config(default, load_settings().bootstrap_servers)["isolation.level"]
        == "read_committed"
    )
    opted_out = drain(tmp_path, kafka={"isolation.level": "read_uncommitted"})
    assert java_settings(opted_out)["isolation.level"] == "read_uncommitted"
    assert (
        consumer_config(opted_out, load_settings().bootstrap_servers)["isolation.level"]
        == "read_uncommitted"
    )
    # admin clients and producers would warn about a consumer-only property
    assert "isolation.level" not in client_config(opted_out, load_settings().bootstrap_servers)


def test_a_tilde_in_a_file_setting_is_the_home_directory_for_both_clients(tmp_path, monkeypatch):
    """The documented mTLS example writes `~/.cache/drainer/kafka/tls/…`: neither librdkafka nor
    Java expands `~`, so drainer must (before, librdkafka got the literal `~/ca.pem`)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("ca.pem", "client.pem", "client.key", "crl.pem", "trust.p12"):
        (tmp_path / name).write_text(
            "-----BEGIN PRIVATE KEY-----\nBBB\n-----END PRIVATE KEY-----\n"
        )
    d = drain(
        tmp_path,
        kafka={
            "security.protocol": "SSL",
            "ssl.ca.location": "~/ca.pem",
            "ssl.certificate.location": "~/client.pem",
            "ssl.key.location": "~/client.key",
        },
        kafka_librdkafka={"ssl.crl.location": "~/crl.pem"},
        kafka_java={"ssl.keystore.location": "~/trust.p12"},
    )
    librdkafka = librdkafka_settings(d)
    for key, name in (
        ("ssl.ca.location", "ca.pem"),
        ("ssl.certificate.location", "client.pem"),
        ("ssl.key.location", "client.key"),
        ("ssl.crl.location", "crl.pem"),
    ):
        assert librdkafka[key] == str(tmp_path / name), key
    java = java_settings(d)
    assert java["ssl.truststore.location"] == str(tmp_path / "ca.pem")
    assert java["ssl.keystore.location"] == str(tmp_path / "trust.p12")
    assert "~" not in "".join(java.values())


def test_sparks_group_id_follows_every_consumer_setting_without_showing_them(tmp_path, monkeypatch):
    """Spark pools its consumers by group id and refuses one made with other settings: an edit or
    a rotated password must change the id, and the id must not let anyone test a guess."""
    from spark_jobs.kafka_source import consumer_settings

    home = tmp_path / "home"
    monkeypatch.setenv("TEST_KAFKA_PASSWORD", "first")
    d = drain(tmp_path, kafka=SCRAM)
    first = consumer_settings(d, "kafka:9092", home)
    assert first == consumer_settings(d, "kafka:9092", home)  # the next run reuses the pool
    assert first["group.id"].startswith("billing-spark-")
    edited = consumer_settings(
        drain(tmp_path, kafka=SCRAM, kafka_java={"max.poll.records": 100}), "kafka:9092", home
    )
    assert edited["max.poll.records"] == "100"  # the drain's own setting wins over drainer's
    monkeypatch.setenv("TEST_KAFKA_PASSWORD", "rotated")
    rotated = consumer_settings(d, "kafka:9092", home)["group.id"]
    assert len({first["group.id"], edited["group.id"], rotated}) == 3
    # keyed with the home's secret: the same settings under another home give another id
    assert consumer_settings(d, "kafka:9092", tmp_path / "other")["group.id"] != rotated
