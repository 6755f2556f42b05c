"""Secured clusters on the real local broker: SASL_PLAINTEXT/SCRAM-SHA-512 and mutual-TLS SSL.

`drainer services up` gives the local broker a SCRAM listener (port+2) and an SSL listener with
client certificates required (port+3), with a CA and certificates made by openssl. A drain
configured with one common `kafka:` block drains end to end through each: the plan (librdkafka),
the Spark read (the Java client, with the translated JAAS line or PEM stores), the mirror. The
password comes from the environment and shows in no output, log line, error or plan text.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from offsets import level_watermarks, mirrored_offsets
from psycopg.errors import UndefinedTable
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from drainer.kafka.producer import OutRecord
from drainer.services.kafka_config import SASL_OFFSET, SSL_OFFSET, KafkaPaths
from drainer.services.kafka_tls import LocalCredentials
from drainer.settings import load_settings
from drainer.spark.net import host_port, port_open
from spark_jobs.examples import RECORD_ECHO_SCHEMA
from tests.support.stack import get_engine, produce_records

DRAINER = [sys.executable, "-m", "spark_jobs.cli"]
RECORDS = 60


@pytest.fixture
def local_listeners(stack) -> tuple[str, str, LocalCredentials]:
    settings = load_settings()
    if not settings.local_kafka:
        pytest.skip("KAFKA_BOOTSTRAP_SERVERS names an external broker: no local listeners")
    host, port = host_port(settings.bootstrap_servers, 9092)
    sasl, ssl = f"{host}:{port + SASL_OFFSET}", f"{host}:{port + SSL_OFFSET}"
    if not (port_open(host, port + SASL_OFFSET) and port_open(host, port + SSL_OFFSET)):
        pytest.fail(
            f"the local broker has no SASL/SSL listeners at {sasl}, {ssl}: it was started by an "
            "older drainer; restart it with `drainer services down && drainer services up`"
        )
    return sasl, ssl, LocalCredentials(KafkaPaths.under(settings.home).tls)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*DRAINER, "-v", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env, "COLUMNS": "250"},
    )


def _from_home(path: Path | str) -> str:
    """`path` written as `~/…` when it lies under the home directory (the documented form)."""
    path = Path(path)
    return f"~/{path.relative_to(Path.home())}" if path.is_relative_to(Path.home()) else str(path)


def _drain_end_to_end(make_drain, monkeypatch, bootstrap: str, kafka: dict, secret: str) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", bootstrap)
    drain = make_drain(
        mode="record",
        handler="spark_jobs.examples:record_echo",
        output_schema=RECORD_ECHO_SCHEMA,
        partitions=2,
        kafka=kafka,
    )
    for level in range(drain.levels):
        produce_records(
            drain, [OutRecord(value=f"v{i}".encode(), key=b"k") for i in range(RECORDS)], level
        )
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "DRAINER_CONFIG": os.environ["DRAINER_CONFIG"]}
    outputs, stdout = [], {}
    for args in (("plan", drain.name), ("run", drain.name, "--json"), ("status", drain.name)):
        done = _cli(*args, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout + done.stderr)
        stdout[args[0]] = done.stdout
    result = json.loads(stdout["run"])
    assert result["drained"] == 3 * RECORDS and result["warnings"] == []
    with get_engine().connect() as conn:
        rows = conn.scalar(text(f'SELECT count(*) FROM "{drain.sink.table}"'))
    assert rows == 3 * RECORDS
    # the mirror went through the secured listener too
    mirrored = mirrored_offsets(drain, 2, [(drain.level_topic(2), p) for p in (0, 1)])
    assert sum(offset for offset, _ in mirrored.values()) == RECORDS
    for output in outputs:
        assert secret not in output
    return drain


def test_drains_through_the_scram_listener_and_the_password_shows_nowhere(
    monkeypatch, make_drain, local_listeners, spark, caplog
):
    sasl, _, creds = local_listeners
    monkeypatch.setenv("KAFKA_PASSWORD", creds.password)
    kafka = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": creds.username,
        "sasl.password": "${KAFKA_PASSWORD}",
    }
    drain = _drain_end_to_end(make_drain, monkeypatch, sasl, kafka, creds.password)

    # Spark reads with the generated JAAS line, and redacts it (and PEM keys) from plan text
    import re

    from drainer.store.runs import StoredRange
    from spark_jobs.kafka_source import read_ranges

    (level, part), marks = next(
        (key, wm) for key, wm in level_watermarks(drain, [0]).items() if wm.high
    )
    rng = StoredRange(drain.level_topic(level), level, part, 0, marks.high, "", marks.high)
    df = read_ranges(spark, drain, sasl, [rng], home=load_settings().home)
    plan_text = io.StringIO()
    with contextlib.redirect_stdout(plan_text):  # explain prints, on Connect and in-process alike
        df.explain(mode="extended")
    assert "kafka" in plan_text.getvalue().lower()  # it is the Kafka read's plan
    assert creds.password not in plan_text.getvalue()
    assert df.count() == RECORDS
    redacted = spark.conf.get("spark.sql.redaction.options.regex")
    for option in ("kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.sasl.password"):
        assert re.search(redacted.replace("(?i)", ""), option, re.IGNORECASE), option

    # a wrong password: one clear line, exit 2, and the wrong password is not echoed either
    wrong = "wrong-" + creds.password[:6]
    done = _cli(
        "plan",
        drain.name,
        env={
            "KAFKA_BOOTSTRAP_SERVERS": sasl,
            "KAFKA_PASSWORD": wrong,
            "DRAINER_CONFIG": os.environ["DRAINER_CONFIG"],
        },
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Authentication failed" in done.stderr and "SCRAM-SHA-512" in done.stderr
    assert wrong not in done.stdout + done.stderr
    assert creds.password not in caplog.text


def test_drains_through_the_mutual_tls_listener(monkeypatch, make_drain, local_listeners, spark):
    _, ssl, creds = local_listeners
    kafka = {  # as docs/operations.md writes it: `~/…` paths, expanded by drainer for both clients
        "security.protocol": "SSL",
        "ssl.ca.location": _from_home(creds.ca),
        "ssl.certificate.location": _from_home(creds.client_certificate),
        "ssl.key.location": _from_home(creds.client_key),
    }
    _drain_end_to_end(make_drain, monkeypatch, ssl, kafka, Path(creds.client_key).read_text())


def _tables_holding(*texts: str) -> dict[str, list[str]]:
    """For each of `texts`, every table of drainer's database (and the sinks) with a row whose
    text contains it. One scan of each table for all texts: the shared database holds every
    sink table the suite and earlier sessions made (thousands), so each pass costs seconds."""
    columns = ", ".join(f"coalesce(bool_or(s LIKE :p{i}), false)" for i in range(len(texts)))
    params = {f"p{i}": f"%{t}%" for i, t in enumerate(texts)}
    found: dict[str, list[str]] = {t: [] for t in texts}
    with get_engine().connect() as conn:
        tables = conn.execute(
            text(
                "SELECT quote_ident(table_name) FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            )
        ).scalars()
        for table in list(tables):
            query = f"SELECT {columns} FROM (SELECT t::text AS s FROM {table} t) rows"
            try:
                with conn.begin_nested():  # a savepoint: a table gone is no failed transaction
                    row = conn.execute(text(query), params).one()
            except ProgrammingError as err:
                # the tests running beside this one drop their stage tables as they commit
                if not isinstance(err.orig, UndefinedTable):
                    raise
                continue
            for text_, held in zip(texts, row, strict=True):
                if held:
                    found[text_].append(table)
    return found


def test_a_password_in_an_error_is_redacted_from_every_table_and_log_line(
    monkeypatch, make_drain, local_listeners, caplog
):
    """An error that echoes the SASL password (as a client's connection error may): before, it
    was stored as is in runs.error (and from there in plan_abandons.last_error)."""
    import logging

    from drainer.config.kafka_clients import librdkafka_settings
    from drainer.errors import PlanKeepsFailing, RunFailed
    from drainer.lifecycle.abandon import abandon_plan
    from drainer.lifecycle.run import drain_once

    sasl, _, creds = local_listeners
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", sasl)
    monkeypatch.setenv("KAFKA_PASSWORD", creds.password)
    drain = make_drain(
        levels=1,
        partitions=1,
        kafka={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": creds.username,
            "sasl.password": "${KAFKA_PASSWORD}",
        },
    )
    produce_records(drain, [OutRecord(value=b"v", key=b"k")], 0)

    def leaky(ctx):
        settings = librdkafka_settings(ctx.drain)
        raise RuntimeError(f"login refused for {settings['sasl.password']} at {sasl}")

    caplog.set_level(logging.DEBUG)
    with pytest.raises(RunFailed):  # the executor's own error, as its root cause
        drain_once(drain, leaky, trigger="test", settings=load_settings())
    with pytest.raises(PlanKeepsFailing) as info:  # drainer's message about it
        drain_once(drain, leaky, trigger="test", settings=load_settings())
    assert "login refused for ***" in str(info.value) and creds.password not in str(info.value)
    abandon_plan(drain, "credentials rotated", load_settings())
    holding = _tables_holding(creds.password, "login refused for ***")
    assert holding[creds.password] == []
    assert holding["login refused for ***"]  # the error itself is kept, redacted
    assert creds.password not in caplog.text


@pytest.mark.parametrize(
    ("listener", "producer"), [("scram", "auto"), ("ssl", "auto"), ("scram", "driver")]
)
def test_a_kafka_sink_produces_through_each_secured_listener_and_the_secret_shows_nowhere(
    monkeypatch, make_drain, local_listeners, spark, listener, producer
):
    """The sink's producer takes the drain's one `kafka:` block: librdkafka's settings on the
    driver, the same block translated for the Java client on the Spark server (the JAAS line,
    PEM stores). Exactly once, read back by distinct source coordinates."""
    from kafka_output import auto_producer, output_topic, sources

    from drainer.observe.status import drain_status

    sasl, ssl, creds = local_listeners
    monkeypatch.setenv("KAFKA_PASSWORD", creds.password)
    if listener == "scram":
        bootstrap, secret = sasl, creds.password
        kafka = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": creds.username,
            "sasl.password": "${KAFKA_PASSWORD}",
        }
    else:
        bootstrap, secret = ssl, Path(creds.client_key).read_text().splitlines()[1]
        kafka = {
            "security.protocol": "SSL",
            "ssl.ca.location": _from_home(creds.ca),
            "ssl.certificate.location": _from_home(creds.client_certificate),
            "ssl.key.location": _from_home(creds.client_key),
        }
    plain = load_settings().bootstrap_servers
    with output_topic() as out:  # made, and read back below, through the plain listener
        monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", bootstrap)
        drain = make_drain(
            mode="dataframe",
            processor="spark_jobs.examples:kafka_passthrough",
            sink={"type": "kafka", "topic": out, "producer": producer},
            partitions=2,
            kafka=kafka,
        )
        for level in range(drain.levels):
            records = [OutRecord(value=f"v{i}".encode(), key=b"k%d" % i) for i in range(20)]
            produce_records(drain, records, level)
        env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "DRAINER_CONFIG": os.environ["DRAINER_CONFIG"]}
        done = _cli("run", drain.name, "--json", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["drained"] == 3 * 20
        assert secret not in done.stdout + done.stderr
        (run,) = drain_status(drain, load_settings())[
            "runs"
        ]  # its backlog read through the secured listener
        with monkeypatch.context() as unsecured:  # then back: the drain's clean-up is secured
            unsecured.setenv("KAFKA_BOOTSTRAP_SERVERS", plain)
            seen = sources(out)
        assert len(seen) == 3 * 20 and set(seen.values()) == {1}
        assert run["table_commit"]["details"]["producer"] == (
            auto_producer(spark) if producer == "auto" else producer
        )
