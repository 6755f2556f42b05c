"""Records that were not done: per-run failures, attempts across runs, dead letters.

Spark tasks stage a run's failures (`stage_failures`, plain psycopg); the commit transaction
counts attempts and moves records that reached `max_attempts` to the dead letters, where they
count as done. Both attempts and dead letters are keyed by the topic's Kafka id as well as
(topic, partition, offset): a recreated topic's offsets name other records.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, Row, text

# a staged failure's error starts so when its value did not decode with the declared format:
# another attempt cannot decode it either, so it goes to the dead letters at once
UNDECODABLE = "undecodable: "


def undecodable(error: str | None) -> bool:
    """A staged failure of a record that does not decode (`bad_records: dead_letter`)."""
    return bool(error) and str(error).startswith(UNDECODABLE)


def is_dead_letter(attempts: int, max_attempts: int, error: str | None) -> bool:
    """Whether a record failed for good: the one rule the commit and a sink that publishes the
    dead letters in its own transaction (the Kafka sink) both decide by."""
    return attempts >= max_attempts or undecodable(error)


def coming_dead_letters(
    conn: Connection, drain: str, run_id: int, attempt: int, max_attempts: int
) -> list[Row[Any]]:
    """The records attempt `attempt` of the run failed for good, as its commit will decide
    (under the drain's lease nothing else counts attempts in between): each with its
    attempts after this one, in the commit's order."""
    rows = conn.execute(
        text(
            'SELECT f.topic, f.partition, f."offset", f.key, f.value, f.headers, f.error, '
            "COALESCE(a.attempts, 0) + 1 AS attempts FROM record_failures f "
            "LEFT JOIN drain_topics t ON t.drain = :d AND t.topic = f.topic "
            "LEFT JOIN record_attempts a ON a.drain = :d AND a.topic = f.topic "
            "AND a.topic_id = COALESCE(t.topic_id, '') AND a.partition = f.partition "
            'AND a."offset" = f."offset" '
            "WHERE f.run_id = :r AND f.attempt = :a AND NOT f.held_back "
            # a retried dead letter that fails again is the commit's to decide (finish_retries)
            "AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.retry_run_id = :r "
            'AND d.topic = f.topic AND d.partition = f.partition AND d."offset" = f."offset") '
            'ORDER BY f.topic, f.partition, f."offset"'
        ),
        {"d": drain, "r": run_id, "a": attempt},
    ).all()
    return [r for r in rows if is_dead_letter(r.attempts, max_attempts, r.error)]


def stage_failures(
    conn: Any,
    run_id: int,
    topic: str,
    partition: int,
    rows: Iterable[tuple[Any, ...]],
    attempt: int = 0,
) -> None:
    """In a Spark task's transaction (psycopg): add not-done records of one Kafka partition,
    as the run's attempt `attempt` found them.

    Each row is (offset, held_back, key, value, headers, ts, error). The task cleared the
    partition's earlier try in this attempt first (`clear_partition_failures`).
    """
    with conn.cursor().copy(
        'COPY record_failures (run_id, attempt, topic, partition, "offset", held_back, key, '
        "value, headers, ts, error) FROM STDIN"
    ) as copy:
        for row in rows:
            copy.write_row((run_id, attempt, topic, partition, *row))


def clear_partition_failures(
    conn: Any, run_id: int, topic: str, partition: int, attempt: int = 0
) -> None:
    """In a Spark task (psycopg): drop the failures an earlier try of this task (in attempt
    `attempt`) staged for a partition; other attempts' stay theirs."""
    conn.execute(
        "DELETE FROM record_failures WHERE run_id = %s AND attempt = %s AND topic = %s "
        "AND partition = %s",
        (run_id, attempt, topic, partition),
    )


def clear_failures(conn: Connection, run_id: int) -> None:
    conn.execute(text("DELETE FROM record_failures WHERE run_id = :r"), {"r": run_id})


def clear_undecodable(conn: Connection, run_id: int, attempt: int) -> None:
    """Drop the records an attempt staged as undecodable (they are staged again whole)."""
    conn.execute(
        text(
            "DELETE FROM record_failures WHERE run_id = :r AND attempt = :a "
            "AND starts_with(error, :u)"
        ),
        {"r": run_id, "a": attempt, "u": UNDECODABLE},
    )


def clear_failures_below(
    conn: Connection, run_id: int, topic: str, partition: int, offset: int
) -> None:
    """Drop a run's staged failures of one partition below `offset` (records retention deleted
    since: lost, not failed)."""
    conn.execute(
        text(
            "DELETE FROM record_failures WHERE run_id = :r AND topic = :t AND partition = :p "
            'AND "offset" < :o'
        ),
        {"r": run_id, "t": topic, "p": partition, "o": offset},
    )


def run_failures(
    conn: Connection, run_id: int, attempt: int | None = None
) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """(topic, partition) -> the not-done records of attempt `attempt` of the run (None: of
    every attempt), in offset order."""
    found: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    rows = conn.execute(
        text(
            'SELECT topic, partition, "offset", held_back, key, value, headers, ts, error '
            "FROM record_failures WHERE run_id = :r AND (CAST(:a AS integer) IS NULL OR attempt = :a) "
            'ORDER BY topic, partition, "offset"'
        ),
        {"r": run_id, "a": attempt},
    )
    for row in rows.mappings():
        found[(row["topic"], row["partition"])].append(dict(row))
    return found


def count_attempt(
    conn: Connection,
    drain: str,
    topic: str,
    topic_id: str,
    partition: int,
    offset: int,
    error: str | None,
) -> int:
    """One more failed attempt of a record; returns its attempts so far."""
    found = conn.scalar(
        text(
            "INSERT INTO record_attempts "
            '(drain, topic, topic_id, partition, "offset", attempts, last_error) '
            "VALUES (:d, :t, :i, :p, :o, 1, :e) "
            'ON CONFLICT (drain, topic, topic_id, partition, "offset") '
            "DO UPDATE SET attempts = record_attempts.attempts + 1, last_error = :e, "
            "updated_at = now() RETURNING attempts"
        ),
        {"d": drain, "t": topic, "i": topic_id, "p": partition, "o": offset, "e": error},
    )
    return int(found)


def forget_attempts_from(
    conn: Connection, drain: str, topic: str, partition: int, offset: int
) -> None:
    """A rewind: records from `offset` on are drained again, their earlier attempts forgotten."""
    conn.execute(
        text(
            "DELETE FROM record_attempts WHERE drain = :d AND topic = :t AND partition = :p "
            'AND "offset" >= :o'
        ),
        {"d": drain, "t": topic, "p": partition, "o": offset},
    )


def insert_dead_letter(
    conn: Connection,
    drain: str,
    run_id: int,
    level: int,
    failure: dict[str, Any],
    headers_json: str | None,
    attempts: int,
    topic: str,
    topic_id: str,
    partition: int,
    published: bool = False,
) -> int:
    """Move a record to the dead letters (done from now on) and forget its attempts.

    The same record dead-lettered again (after a rewind) replaces its earlier dead letter,
    and is published to the DLQ topic again: it is a new dead letter, whatever the old one's
    publication or retry request. `published`: the sink's own transaction already carried it to the DLQ topic.
    """
    dead_id = conn.scalar(
        text(
            "INSERT INTO dead_letters (drain, run_id, topic, topic_id, level, partition, "
            '"offset", key, value, headers, ts, error, attempts, dlq_published_at) VALUES '
            "(:d, :r, :t, :i, :l, :p, :o, :k, :v, CAST(:h AS jsonb), :ts, :e, :a, "
            "CASE WHEN :pub THEN now() END) "
            'ON CONFLICT (drain, topic, topic_id, partition, "offset") '
            "DO UPDATE SET run_id = :r, level = :l, key = :k, value = :v, "
            "headers = CAST(:h AS jsonb), ts = :ts, error = :e, attempts = :a, "
            "retried_at = NULL, retry_requested_at = NULL, retry_value = NULL, "
            "retry_run_id = NULL, dlq_published_at = EXCLUDED.dlq_published_at, created_at = now() "
            "RETURNING id"
        ),
        {
            "d": drain,
            "r": run_id,
            "t": topic,
            "i": topic_id,
            "l": level,
            "p": partition,
            "o": failure["offset"],
            "k": failure["key"],
            "v": failure["value"],
            "h": headers_json,
            "ts": failure["ts"],
            "e": failure["error"],
            "a": attempts,
            "pub": published,
        },
    )
    conn.execute(
        text(
            "DELETE FROM record_attempts WHERE drain = :d AND topic = :t AND topic_id = :i "
            'AND partition = :p AND "offset" = :o'
        ),
        {"d": drain, "t": topic, "i": topic_id, "p": partition, "o": failure["offset"]},
    )
    return int(dead_id)


def list_dead_letters(
    conn: Connection, drain: str, limit: int, include_retried: bool
) -> list[dict[str, Any]]:
    rows = conn.execute(
        text(
            'SELECT id, topic, level, partition, "offset", key, value, error, attempts, '
            "created_at, retry_requested_at, retried_at "
            "FROM dead_letters WHERE drain = :d AND (:all OR retried_at IS NULL) "
            "ORDER BY id LIMIT :n"
        ),
        {"d": drain, "all": include_retried, "n": limit},
    ).mappings()
    return [dict(row) for row in rows]


def pending_dead_letters(conn: Connection, drain: str) -> int:
    """Dead letters not retried yet: the one count `status` and the asset check both show."""
    found = conn.scalar(
        text("SELECT count(*) FROM dead_letters WHERE drain = :d AND retried_at IS NULL"),
        {"d": drain},
    )
    return int(found)


def pending_by_level(conn: Connection, drain: str) -> dict[int, int]:
    """Dead letters not retried yet, per level (`drainer status`)."""
    rows = conn.execute(
        text(
            "SELECT level, count(*) AS n FROM dead_letters WHERE drain = :d "
            "AND retried_at IS NULL GROUP BY level"
        ),
        {"d": drain},
    ).all()
    return {int(row.level): int(row.n) for row in rows}


def dead_letter(conn: Connection, drain: str, dead_id: int) -> dict[str, Any] | None:
    """One dead letter of `drain`, every column; None when `dead_id` is not one of them."""
    row = (
        conn.execute(
            text(
                'SELECT id, run_id, topic, level, partition, "offset", key, value, headers, ts, '
                "error, attempts, created_at, retry_requested_at, retried_at "
                "FROM dead_letters WHERE drain = :d AND id = :i"
            ),
            {"d": drain, "i": dead_id},
        )
        .mappings()
        .first()
    )
    return None if row is None else dict(row)


def retried_of(conn: Connection, drain: str, ids: list[int]) -> dict[int, Any]:
    """Of `ids`, those that are dead letters of `drain`, each with when it was retried (None:
    not yet) and its error; ids missing from the result are not the drain's dead letters."""
    rows = conn.execute(
        text(
            "SELECT id, retried_at, retry_requested_at, error FROM dead_letters "
            "WHERE drain = :d AND id = ANY(:ids)"
        ),
        {"d": drain, "ids": ids},
    ).all()
    return {row.id: row for row in rows}


def undecodable_pending(conn: Connection, drain: str) -> int:
    """Dead letters not retried that did not decode: a retry as they are would fail again."""
    found = conn.scalar(
        text(
            "SELECT count(*) FROM dead_letters WHERE drain = :d AND retried_at IS NULL "
            "AND retry_requested_at IS NULL AND starts_with(error, :u)"
        ),
        {"d": drain, "u": UNDECODABLE},
    )
    return int(found)


def unpublished(conn: Connection, drain: str) -> Sequence[Row[Any]]:
    """Dead letters not yet on the drain's DLQ topic, oldest first."""
    return conn.execute(
        text(
            'SELECT id, topic, partition, "offset", key, value, headers, error, attempts '
            "FROM dead_letters WHERE drain = :d AND dlq_published_at IS NULL ORDER BY id"
        ),
        {"d": drain},
    ).all()


def mark_published(conn: Connection, ids: list[int]) -> None:
    conn.execute(
        text("UPDATE dead_letters SET dlq_published_at = now() WHERE id = ANY(:ids)"),
        {"ids": ids},
    )
