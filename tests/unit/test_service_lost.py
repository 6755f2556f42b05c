"""A Spark job error whose root cause is a lost service becomes one line naming it."""

from __future__ import annotations

from drainer.errors import DatabaseUnavailable, KafkaUnavailable
from spark_jobs.drain_job import service_lost

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
