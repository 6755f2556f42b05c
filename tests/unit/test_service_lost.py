"""A Spark job error whose root cause is a lost service (Postgres, Kafka, a sink's Iceberg
catalog) becomes one line naming it."""

from __future__ import annotations

import yaml

from drainer.config import load_drains
from drainer.errors import (
    CatalogUnavailable,
    DatabaseUnavailable,
    KafkaUnavailable,
    SparkUnavailable,
)
from drainer.settings import load_settings
from spark_jobs.drain_job import known_failure, service_lost

WORKER_TRACE = """An error occurred while calling o123.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed
  File "/work/spark_jobs/modes.py", line 86, in process_partition
    with psycopg.connect(url) as conn:
psycopg.OperationalError: connection failed: connection to server at "127.0.0.1", port 55432 failed: Connection refused
	at org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException
"""
KAFKA_TRACE = """An error occurred while calling o99.collectToPython.
Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired before the position for partition t-0-1 could be determined
	at org.apache.spark.sql.kafka010.consumer.KafkaDataConsumer.fetch
"""


def test_postgres_lost_under_the_tasks_is_one_line():
    lost = service_lost(RuntimeError(WORKER_TRACE))
    assert isinstance(lost, DatabaseUnavailable) and lost.exit_code == 2
    message = str(lost)
    assert "\n" not in message and "Postgres was lost" in message
    assert "psycopg.OperationalError: connection failed" in message


def test_kafka_timeout_in_the_read_is_one_line():
    lost = service_lost(RuntimeError(KAFKA_TRACE))
    assert isinstance(lost, KafkaUnavailable)
    assert "TimeoutException: Timeout of 60000ms expired" in str(lost)
    assert "\n" not in str(lost)


def test_other_errors_keep_their_traceback():
    assert service_lost(ValueError("a bug in a processor")) is None


REST_TRACE_PY4J = """An error occurred while calling o87.sql.
: org.apache.iceberg.exceptions.RESTException: Error occurred while processing GET request
	at org.apache.iceberg.rest.HTTPClient.execute(HTTPClient.java:362)
	at org.apache.iceberg.rest.RESTSessionCatalog.fetchConfig(RESTSessionCatalog.java:1337)
Caused by: org.apache.iceberg.shaded.org.apache.hc.client5.http.HttpHostConnectException: Connect to https://catalog.example.com:8181 failed: Connection refused
	at java.base/sun.nio.ch.Net.pollConnect(Native Method)
"""


def iceberg_drain(tmp_path, catalog):
    path = tmp_path / "drains.yaml"
    body = {"topic": "orders", "group": "billing", "levels": 3, "budget": 70}
    sink = {"type": "iceberg", "table": "analytics.orders", **catalog}
    path.write_text(yaml.safe_dump({"drains": {"orders": {**body, "sink": sink}}}))
    return load_drains(path)["orders"]


def test_an_unreachable_rest_catalog_is_one_line_naming_it_and_its_uri(tmp_path):
    uri = "https://catalog.example.com:8181"
    drain = iceberg_drain(tmp_path, {"catalog": {"name": "lake", "uri": uri}})
    err = known_failure(RuntimeError(REST_TRACE_PY4J), drain, load_settings())
    assert isinstance(err, CatalogUnavailable) and err.exit_code == 2
    message = str(err)
    assert "\n" not in message
    named = f"Iceberg catalog 'lake' of drain 'orders' did not answer at sink.catalog.uri {uri}"
    assert named in message
    assert "HttpHostConnectException: Connect to" in message
    assert "`drainer run orders` again" in message
    # without the drain (or with the embedded catalog) the error is not the catalog's
    assert known_failure(RuntimeError(REST_TRACE_PY4J), None, load_settings()) is None
    embedded = iceberg_drain(tmp_path, {})
    assert known_failure(RuntimeError(REST_TRACE_PY4J), embedded, load_settings()) is None


def test_a_connect_server_gone_mid_run_is_one_line_saying_the_run_resumes():
    """pyspark raises these when the server dies under a job (UNAVAILABLE after its retries) or
    comes back as a new process (the session the client reattaches to is unknown)."""
    import grpc
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    down = SparkConnectGrpcException(
        message="<_MultiThreadedRendezvous of RPC that terminated with:\n"
        '\tstatus = StatusCode.UNAVAILABLE\n\tdetails = "failed to connect to all addresses">',
        grpc_status_code=grpc.StatusCode.UNAVAILABLE,
    )
    restarted = SparkConnectGrpcException(
        message="[INVALID_HANDLE.SESSION_CHANGED] The handle 1234 is invalid.",
        errorClass="INVALID_HANDLE.SESSION_CHANGED",
        messageParameters={"handle": "1234"},
    )
    stopping = SparkConnectGrpcException(
        message="java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext."
    )
    for err in (down, restarted, stopping):
        lost = known_failure(err, None, load_settings())
        assert isinstance(lost, SparkUnavailable) and lost.exit_code == 2, err
        message = str(lost)
        assert "\n" not in message and "Spark Connect server stopped answering" in message
        assert "resumes with the same ranges" in message
    # a job that fails on a live server is not a lost server
    failed = SparkConnectGrpcException(
        message="division by zero", errorClass="DIVIDE_BY_ZERO", messageParameters={}
    )
    assert known_failure(failed, None, load_settings()) is None
