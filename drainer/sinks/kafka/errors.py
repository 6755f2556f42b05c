"""What a Kafka sink failure tells the user, whichever producer met it: the driver's
(confluent-kafka, `transactions`) or the Spark server's (Java, which names the failure's kind,
classified by `protocol.KINDS`, for the driver: spark_jobs.sinks.kafka.server).

Where drainer's words say all there is to fix (fenced, missing topic, too large, no value), the
line leaves the client's own words out: the two producers' clients word a failure differently,
and the user gets the same line from either."""

from __future__ import annotations

from drainer.errors import ConfigError, DrainerError, FencedOut, KafkaUnavailable
from drainer.sinks.kafka.protocol import MARKER_TOPIC


def init_failure(kind: str, detail: str, drain: str, tid: str) -> DrainerError:
    """The producer could not start its transactions (`init_transactions`)."""
    if kind == "denied":
        return ConfigError(
            f"the Kafka sink's producer is not authorised to use the transactional id "
            f"{tid!r} ({detail}): grant it WRITE and DESCRIBE on TransactionalId:{tid} and WRITE "
            f"on the output topics and {MARKER_TOPIC}. Nothing was produced or committed"
        )
    if kind == "timeout":
        return KafkaUnavailable(
            f"the Kafka sink's transactions could not start ({detail}): the broker has no "
            "transaction coordinator; on a cluster with fewer brokers than "
            "transaction.state.log.replication.factor (default 3) or "
            "transaction.state.log.min.isr, lower those broker settings (1 on a one-node "
            "broker) and restart it. Nothing was produced or committed"
        )
    if kind == "fenced":
        return FencedOut(f"a newer attempt of drain {drain!r} took over its producer")
    return KafkaUnavailable(
        f"the Kafka sink's transactions could not start: {detail}. "
        "Nothing was committed: rerun; the run resumes with the same ranges"
    )


def produce_failure(
    kind: str, detail: str, run_id: int, drain: str, tid: str, source: str | None, topic: str
) -> DrainerError:
    """Producing the run's transaction failed: it is aborted, nothing of it is visible."""
    if kind == "fenced":
        return FencedOut(
            f"run {run_id} of drain {drain!r}: a newer attempt took over the producer {tid!r}; "
            "this attempt's transaction is aborted, nothing of it is visible"
        )
    if kind == "missing":
        return missing_topic(topic, source)
    if kind == "no_value":
        return no_value(source)
    if kind == "denied":
        return ConfigError(
            f"the Kafka sink may not write topic {topic} ({detail}): grant WRITE on it "
            f"(and on TransactionalId:{tid}). Nothing was committed"
        )
    if kind == "too_large":
        return ConfigError(
            f"an output record{_from(source)} for topic {topic} is larger than the broker "
            "accepts (max.message.bytes): make it smaller in the processor or "
            "handler, or raise the topic's max.message.bytes and the producer's "
            "message.max.bytes (`kafka_librdkafka:`; `kafka_java:` max.request.size when the "
            "Spark server produces). Nothing was committed"
        )
    return KafkaUnavailable(
        f"producing run {run_id}'s output to {topic} failed ({detail}); "
        "its transaction is aborted. Nothing was committed: rerun; the run resumes with "
        "the same ranges"
    )


def _from(source: str | None) -> str:
    return f" (from source record {source})" if source else ""


def no_value(source: str | None) -> ConfigError:
    return ConfigError(
        f"an output row{_from(source)} has no `value`: Kafka sink rows need a value (string or "
        "binary); set it in the processor or handler. Nothing was committed"
    )


def missing_topic(topic: str, source: str | None = None) -> ConfigError:
    return ConfigError(
        f"the Kafka sink's output topic {topic} does not exist{_for(source)}: create it with "
        f"`drainer topics create <drain>` (it makes a Kafka sink's output topic; `--topic "
        f"{topic}` for any other) or your cluster's own tools. Nothing was committed"
    )


def _for(source: str | None) -> str:
    return f" (output of source record {source})" if source else ""


def not_compacted(topic: str, policy: str) -> ConfigError:
    return ConfigError(
        f"the Kafka sink writes upserts to topic {topic}, whose cleanup.policy is {policy}, not "
        f"compact (its old versions and tombstones would never be compacted away): set it with "
        f"`kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config "
        "cleanup.policy=compact`, or use a new topic (`drainer topics create <drain>` makes it "
        "compacted). Nothing was committed"
    )
