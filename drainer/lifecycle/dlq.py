"""Dead letters: records that failed `max_attempts` times. List them, retry them, publish them.

A retry hands the records back to their own drain only: `retry_dead_letters` marks them
requested in Postgres (with a fixed value, when given) and sends nothing to Kafka, so no other
drain of the same topics ever sees them. The drain's next run claims them in the transaction
that stores its plan (a resumed run retries the same ones), processes them as they were read
(key, value, headers, timestamp, topic, partition, offset, level) without touching any offset,
and its commit marks each retried, or dead again with its new error (`drainer.lifecycle.retries`).
"""

from __future__ import annotations

import base64
import json
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
from drainer.store import dead_letters, get_engine, retries

log = logging.getLogger(__name__)


def list_dead_letters(
    drain: DrainConfig, settings: Settings, limit: int = 50, include_retried: bool = False
) -> list[dict[str, Any]]:
    """The drain's dead letters, each with its reason (`error`) and payload: `value` as text
    where it is UTF-8 (None otherwise, or for a tombstone) and always `value_base64`."""
    with get_engine(settings.database_url).connect() as conn:
        rows = dead_letters.list_dead_letters(conn, drain.name, limit, include_retried)
    return [_readable(row) for row in rows]


def show_dead_letter(drain: DrainConfig, settings: Settings, dead_id: int) -> dict[str, Any]:
    """One dead letter, whole: where it came from, why, its key, headers and payload."""
    with get_engine(settings.database_url).connect() as conn:
        row = dead_letters.dead_letter(conn, drain.name, dead_id)
    if row is None:
        raise ConfigError(
            f"{dead_id} is not a dead letter of drain '{drain.name}': `drainer dlq list "
            f"{drain.name}` shows its dead letters"
        )
    shown = _readable(row)
    shown["headers"] = [
        [name, None if value is None else payload_text(value)]
        for name, value in decode_headers(row["headers"])
    ]
    return shown


def _readable(row: dict[str, Any]) -> dict[str, Any]:
    value = row.get("value")
    raw = None if value is None else bytes(value)
    return {
        **row,
        "key": None if row["key"] is None else bytes(row["key"]).decode("utf-8", "replace"),
        "value": None if raw is None else _utf8(raw),
        "value_base64": None if raw is None else base64.b64encode(raw).decode(),
        "payload": payload_text(raw),
    }


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def payload_text(raw: bytes | None) -> str:
    """A payload for a terminal: decoded where it can be (UTF-8 text, JSON indented), as
    escaped bytes otherwise; a null value is a tombstone."""
    if raw is None:
        return "null (a tombstone)"
    text_ = _utf8(raw)
    if text_ is None:
        return f"{len(raw):,} bytes, not UTF-8: {raw!r}"
    try:
        return json.dumps(json.loads(text_), indent=2, ensure_ascii=False)
    except ValueError:
        return text_


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


def retry_dead_letters(
    drain: DrainConfig,
    settings: Settings,
    ids: list[int] | None = None,
    value: bytes | None = None,
    as_is: bool = False,
) -> int:
    """Request a retry of dead letters by their drain's next run; returns how many.

    Named `ids` that are not the drain's dead letters, or were retried (or requested) already,
    are a ConfigError naming them, and nothing is requested. `value` replaces the payload of
    the one dead letter named (a fixed record). A record that did not decode would fail the
    same way again: named, it is refused unless fixed (`value`) or `as_is` (the drain's format
    was fixed since); without `ids`, such records stay and the others are requested.
    """
    if value is not None and (not ids or len(ids) != 1):
        raise ConfigError(
            "dlq retry --value-from fixes one dead letter: name it with `--ids ID` "
            f"(`drainer dlq show {drain.name} ID` prints its payload)"
        )
    with get_engine(settings.database_url).begin() as conn:
        if ids:
            known = dead_letters.retried_of(conn, drain.name, ids)
            _check_ids(drain.name, ids, known)
            if value is None and not as_is:
                _refuse_undecodable(drain.name, [known[i] for i in ids])
        rows = retries.request_retry(
            conn, drain.name, ids, undecodable_too=bool(ids) or as_is, value=value
        )
    if rows:
        log.info(
            "drain %s: dead letters %s requested for a retry by its next run%s",
            drain.name,
            ", ".join(str(r.id) for r in rows),
            " (with the value given)" if value is not None else "",
        )
    return len(rows)


def undecodable_left(drain: DrainConfig, settings: Settings) -> int:
    """Dead letters a retry of all left alone: they did not decode, and would not again."""
    with get_engine(settings.database_url).connect() as conn:
        return dead_letters.undecodable_pending(conn, drain.name)


def _refuse_undecodable(drain: str, rows: list[Any]) -> None:
    same = [r for r in rows if dead_letters.undecodable(r.error)]
    if not same:
        return
    first = same[0]
    raise ConfigError(
        f"dead letter {first.id} did not decode ({first.error.removeprefix(dead_letters.UNDECODABLE)})"
        " and would fail the same way again: fix it with `drainer dlq retry "
        f"{drain} --ids {first.id} --value-from FILE` (`drainer dlq show {drain} {first.id}` "
        "prints it), or add --as-is once the drain's format is fixed; nothing was requested"
    )


def _check_ids(drain: str, ids: list[int], known: dict[int, Any]) -> None:
    unknown = [i for i in ids if i not in known]
    retried = [i for i in ids if i in known and known[i].retried_at is not None]
    requested = [
        i
        for i in ids
        if i in known and known[i].retried_at is None and known[i].retry_requested_at is not None
    ]
    problems = []
    if unknown:
        problems.append(f"{_listed(unknown)} not {_a('dead letter', unknown)} of drain '{drain}'")
    if retried:
        problems.append(f"{_listed(retried)} already retried")
    if requested:
        problems.append(f"{_listed(requested)} already requested (the next run retries it)")
    if problems:
        raise ConfigError(
            f"dlq retry --ids: {'; '.join(problems)}: nothing was requested; "
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
