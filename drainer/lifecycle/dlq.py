"""Dead letters: records that failed `max_attempts` times. List them, retry them, publish them.

A retry re-produces the record to its level topic with key, value and headers byte-identical
(nothing added: the handler sees the record it failed on) and drains it again as a new record
(new offset); the dead letter's `retried_at` and a log line record which one it was. Claiming a dead letter marks it retried in the same statement, inside the transaction
that stays open until Kafka acknowledged the records, so two concurrent retries never both
produce one, and a failed produce leaves it unretried. A crash between Kafka's acknowledgement
and the commit leaves it unretried too: retried again, it is produced twice (at least once).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Engine

from drainer.config import DrainConfig
from drainer.config.kafka_clients import redact
from drainer.errors import ConfigError
from drainer.kafka.producer import OutRecord, produce_records
from drainer.kafka.session import KafkaSession
from drainer.processing.headers import decode_headers
from drainer.settings import Settings
from drainer.store import dead_letters, get_engine

log = logging.getLogger(__name__)


def list_dead_letters(
    drain: DrainConfig, settings: Settings, limit: int = 50, include_retried: bool = False
) -> list[dict[str, Any]]:
    with get_engine(settings.database_url).connect() as conn:
        rows = dead_letters.list_dead_letters(conn, drain.name, limit, include_retried)
    return [
        {**row, "key": None if row["key"] is None else bytes(row["key"]).decode("utf-8", "replace")}
        for row in rows
    ]


def _as_record(row: Any, extra_headers: list[tuple[str, bytes]] | None = None) -> OutRecord:
    """A dead letter as it was produced (key, value, headers), plus any drainer headers."""
    headers = decode_headers(row.headers)
    return OutRecord(
        value=None if row.value is None else bytes(row.value),
        key=None if row.key is None else bytes(row.key),
        headers=[*headers, *(extra_headers or [])],
    )


def dlq_record(dead: Any) -> OutRecord:
    """A dead letter as the DLQ topic gets it, however it is published: as it was produced,
    plus where it came from, its (redacted) error and its attempts."""
    return _as_record(
        dead,
        [
            ("drainer-source", f"{dead.topic}/{dead.partition}/{dead.offset}".encode()),
            ("drainer-error", redact(dead.error or "").encode()[:8000]),
            ("drainer-attempts", str(dead.attempts).encode()),
        ],
    )


def retry_dead_letters(drain: DrainConfig, settings: Settings, ids: list[int] | None = None) -> int:
    """Claim dead letters (marking them retried), re-produce them, then commit the claim.

    Named `ids` that are not the drain's dead letters, or were retried already, are a
    ConfigError naming them, and nothing is re-produced.
    """
    engine = get_engine(settings.database_url)
    with engine.begin() as conn, KafkaSession(drain, settings) as kafka:
        if ids:
            _check_ids(drain.name, ids, dead_letters.retried_of(conn, drain.name, ids))
        rows = dead_letters.claim_for_retry(conn, drain.name, ids)
        for level in sorted({r.level for r in rows}):
            produce_records(
                drain,
                (_as_record(r) for r in rows if r.level == level),
                level=level,
                kafka=kafka,
            )
    if rows:
        log.info(
            "drain %s: re-produced dead letters %s to their level topics",
            drain.name,
            ", ".join(str(r.id) for r in rows),
        )
    return len(rows)


def _check_ids(drain: str, ids: list[int], known: dict[int, Any]) -> None:
    unknown = [i for i in ids if i not in known]
    retried = [i for i in ids if known.get(i) is not None]
    problems = []
    if unknown:
        problems.append(f"{_listed(unknown)} not {_a('dead letter', unknown)} of drain '{drain}'")
    if retried:
        problems.append(f"{_listed(retried)} already retried")
    if problems:
        raise ConfigError(
            f"dlq retry --ids: {'; '.join(problems)}: nothing was re-produced; "
            f"`drainer dlq list {drain}` shows its dead letters and which are retried"
        )


def _listed(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids) + (" is" if len(ids) == 1 else " are")


def _a(noun: str, ids: list[int]) -> str:
    return f"a {noun}" if len(ids) == 1 else f"{noun}s"


def publish_dead_letters(engine: Engine, drain: DrainConfig, kafka: KafkaSession) -> int:
    """Publish dead letters not yet on the drain's `dlq_topic`; returns how many went out.

    After the commit, like the Kafka mirror: at least once (a crash between the send and the
    mark sends them again). A Kafka sink on the drain's cluster produces them in the run's
    transaction instead (exactly once), and the commit records them published. A missing
    topic is a ConfigError, a failed publish a KafkaUnavailable; the run reports either as a
    warning and the next run publishes them.
    """
    if not drain.dlq_topic:
        return 0
    with engine.connect() as conn:
        rows = dead_letters.unpublished(conn, drain.name)
    if not rows:
        return 0
    if kafka.partition_counts([drain.dlq_topic])[drain.dlq_topic] is None:
        # said at once: a producer waits ~30 s for a topic's metadata before it gives up
        raise ConfigError(
            f"dlq_topic {drain.dlq_topic} does not exist: create it (`drainer topics create "
            f"{drain.name}` creates it with the level topics) or remove dlq_topic from the "
            f"drain. {len(rows):,} dead letters wait in Postgres (`drainer dlq list "
            f"{drain.name}`)"
        )
    records = [dlq_record(r) for r in rows]
    produce_records(drain, records, topic=drain.dlq_topic, kafka=kafka)
    with engine.begin() as conn:
        dead_letters.mark_published(conn, [r.id for r in rows])
    return len(rows)
