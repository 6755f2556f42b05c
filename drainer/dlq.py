"""Dead letters: records that failed `max_attempts` times. List them, retry them, publish them.

A retry re-produces the record, unchanged, to its level topic: it drains again as a new record
(new offset), and the dead letter is marked retried, so it is never retried twice by accident.
"""

from __future__ import annotations

import json
import logging

from drainer.config import DrainConfig
from drainer.errors import KafkaUnavailable
from drainer.producer import OutRecord, produce_records
from drainer.store import dead_letters, get_engine

log = logging.getLogger(__name__)


def list_dead_letters(
    drain: DrainConfig, limit: int = 50, include_retried: bool = False
) -> list[dict]:
    with get_engine().connect() as conn:
        rows = dead_letters.list_dead_letters(conn, drain.name, limit, include_retried)
    return [
        {**row, "key": None if row["key"] is None else bytes(row["key"]).decode("utf-8", "replace")}
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
        rows = dead_letters.retryable(conn, drain.name, ids)
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
            dead_letters.mark_retried(conn, [r.id for r in batch])
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
        rows = dead_letters.unpublished(conn, drain.name)
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
        dead_letters.mark_published(conn, [r.id for r in rows])
    return len(rows)
