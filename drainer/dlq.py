"""Dead letters: records that failed `max_attempts` times (DESIGN §7). List them, retry them.

A retry re-produces the record, unchanged, to its level topic: it drains again as a new record
(new offset), and the dead letter is marked retried, so it is never retried twice by accident.
"""

from __future__ import annotations

import json
import logging

from sqlalchemy import text

from drainer.config import DrainConfig
from drainer.db import get_engine
from drainer.kafka_io import KafkaUnavailable
from drainer.producer import OutRecord, produce_records

log = logging.getLogger(__name__)


def list_dead_letters(
    drain: DrainConfig, limit: int = 50, include_retried: bool = False
) -> list[dict]:
    with get_engine().connect() as conn:
        rows = conn.execute(
            text(
                'SELECT id, topic, level, partition, "offset", key, error, attempts, created_at, retried_at '
                "FROM dead_letters WHERE drain = :d AND (:all OR retried_at IS NULL) "
                "ORDER BY id LIMIT :n"
            ),
            {"d": drain.name, "all": include_retried, "n": limit},
        ).mappings()
        return [
            {
                **row,
                "key": None if row["key"] is None else bytes(row["key"]).decode("utf-8", "replace"),
            }
            for row in rows
        ]


def _as_record(row, extra_headers: list[tuple[str, bytes]]) -> OutRecord:
    """A dead letter as it was produced (key, value, headers), plus drainer's own headers."""
    headers = [(k, None if v is None else str(v).encode()) for k, v in (row.headers or {}).items()]
    return OutRecord(
        value=None if row.value is None else bytes(row.value),
        key=None if row.key is None else bytes(row.key),
        headers=headers + extra_headers,
    )


def retry_dead_letters(drain: DrainConfig, ids: list[int] | None = None) -> int:
    """Re-produce dead letters to their level topic, then mark them retried (per level)."""
    engine = get_engine()
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, level, key, value, headers FROM dead_letters WHERE drain = :d "
                "AND retried_at IS NULL AND (CAST(:ids AS bigint[]) IS NULL OR id = ANY(:ids)) ORDER BY id"
            ),
            {"d": drain.name, "ids": ids},
        ).all()
    retried = 0
    for level in sorted({r.level for r in rows}):
        batch = [r for r in rows if r.level == level]
        produce_records(
            drain,
            (
                _as_record(r, [("drainer-retry-of", json.dumps({"dead_letter": r.id}).encode())])
                for r in batch
            ),
            level=level,
        )
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE dead_letters SET retried_at = now() WHERE id = ANY(:ids)"),
                {"ids": [r.id for r in batch]},
            )
        retried += len(batch)
    return retried


def publish_dead_letters(drain: DrainConfig) -> int:
    """Publish dead letters not yet on the drain's `dlq_topic`; returns how many went out.

    After the commit, like the Kafka mirror: at least once (a crash between the send and the
    mark sends them again), and a failed publish is retried by the next run.
    """
    if not drain.dlq_topic:
        return 0
    engine = get_engine()
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                'SELECT id, topic, partition, "offset", key, value, headers, error, attempts '
                "FROM dead_letters WHERE drain = :d AND dlq_published_at IS NULL ORDER BY id"
            ),
            {"d": drain.name},
        ).all()
    if not rows:
        return 0
    records = [
        _as_record(
            r,
            [
                ("drainer-source", f"{r.topic}/{r.partition}/{r.offset}".encode()),
                ("drainer-error", r.error.encode()[:8000]),
                ("drainer-attempts", str(r.attempts).encode()),
            ],
        )
        for r in rows
    ]
    try:
        produce_records(drain, records, topic=drain.dlq_topic)
    except KafkaUnavailable as err:
        log.warning(
            "publishing %d dead letters to %s failed (%s); the next run retries",
            len(rows),
            drain.dlq_topic,
            err,
        )
        return 0
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE dead_letters SET dlq_published_at = now() WHERE id = ANY(:ids)"),
            {"ids": [r.id for r in rows]},
        )
    return len(rows)
