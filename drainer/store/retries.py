"""Dead letters handed back to their drain (`drainer dlq retry`): requested, claimed by a plan,
finished by its commit (drainer.lifecycle.retries).

A request marks the dead letter (`retry_requested_at`, a fixed value in `retry_value`); the
drain's next plan claims the requested ones of its levels (`retry_run_id`) in the transaction
that stores it; the run's commit marks each retried (`retried_at`), or dead again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Row, text

from drainer.store.dead_letters import UNDECODABLE


def request_retry(
    conn: Connection,
    drain: str,
    ids: list[int] | None,
    undecodable_too: bool = True,
    value: bytes | None = None,
) -> Sequence[Row[Any]]:
    """Mark dead letters not retried nor requested yet (only `ids`, when given; without
    `undecodable_too`, not those that did not decode) requested for a retry by their own drain,
    `value` replacing the payload (a fixed record); returns them.

    Nothing goes to Kafka: the drain's next plan claims them (`claim_requested`). Rows another
    transaction is requesting are skipped, not waited for, so two concurrent requests never
    both get a dead letter.
    """
    rows = conn.execute(
        text(
            "UPDATE dead_letters SET retry_requested_at = now(), retry_value = :v WHERE id IN ("
            " SELECT id FROM dead_letters WHERE drain = :d AND retried_at IS NULL"
            " AND retry_requested_at IS NULL"
            " AND (CAST(:ids AS bigint[]) IS NULL OR id = ANY(:ids))"
            " AND (:all OR NOT starts_with(error, :u))"
            " ORDER BY id FOR UPDATE SKIP LOCKED) "
            "RETURNING id, level"
        ),
        {"d": drain, "ids": ids, "all": undecodable_too, "u": UNDECODABLE, "v": value},
    ).all()
    return sorted(rows, key=lambda row: row.id)


def requested_retries(conn: Connection, drain: str, levels: list[int]) -> int:
    """Dead letters of `levels` requested for a retry that no plan has claimed yet."""
    found = conn.scalar(
        text(
            "SELECT count(*) FROM dead_letters WHERE drain = :d AND level = ANY(:l) "
            "AND retry_requested_at IS NOT NULL AND retry_run_id IS NULL AND retried_at IS NULL"
        ),
        {"d": drain, "l": levels},
    )
    return int(found)


def claim_requested(conn: Connection, drain: str, run_id: int, levels: list[int]) -> list[int]:
    """In the transaction that stores run `run_id`'s plan: the requested retries of `levels`
    become the run's (a resumed run processes the same ones); returns their ids."""
    rows = conn.scalars(
        text(
            "UPDATE dead_letters SET retry_run_id = :r WHERE drain = :d AND level = ANY(:l) "
            "AND retry_requested_at IS NOT NULL AND retry_run_id IS NULL AND retried_at IS NULL "
            "RETURNING id"
        ),
        {"d": drain, "r": run_id, "l": levels},
    ).all()
    return sorted(int(i) for i in rows)


def claimed_count(conn: Connection, run_id: int) -> int:
    """How many dead letters run `run_id` retries (0 for an ordinary run)."""
    found = conn.scalar(
        text("SELECT count(*) FROM dead_letters WHERE retry_run_id = :r AND retried_at IS NULL"),
        {"r": run_id},
    )
    return int(found)


def claimed_records(conn: Any, run_id: int) -> list[tuple[Any, ...]]:
    """The records run `run_id` retries, as they were read (a fixed value instead of the
    stored one): (topic, partition, offset, level, key, value, headers, ts), offset order.
    `conn` is a SQLAlchemy or a psycopg connection (the Spark driver has either)."""
    query = (
        'SELECT topic, partition, "offset", level, key, COALESCE(retry_value, value), '
        "headers, ts FROM dead_letters WHERE retry_run_id = {p} AND retried_at IS NULL "
        'ORDER BY topic, partition, "offset"'
    )
    if isinstance(conn, Connection):
        return [tuple(r) for r in conn.execute(text(query.format(p=":r")), {"r": run_id})]
    return list(conn.execute(query.format(p="%s"), (run_id,)).fetchall())


def cancel_claim(conn: Connection, run_id: int) -> None:
    """An abandoned run's retries are cancelled: its dead letters stay dead letters, not
    requested (a retry that fails the whole run every time would otherwise block the drain
    again at once); `dlq retry` requests them again once the cause is fixed."""
    conn.execute(
        text(
            "UPDATE dead_letters SET retry_run_id = NULL, retry_requested_at = NULL, "
            "retry_value = NULL WHERE retry_run_id = :r AND retried_at IS NULL"
        ),
        {"r": run_id},
    )


@dataclass
class RetryOutcome:
    """What a retry run's commit did with the dead letters it claimed, per level."""

    retried: dict[int, int] = field(default_factory=dict)
    dead_again: dict[int, int] = field(default_factory=dict)
    waiting: dict[int, int] = field(default_factory=dict)  # held back: claimed by the next plan

    @property
    def total_retried(self) -> int:
        return sum(self.retried.values())

    @property
    def total_dead_again(self) -> int:
        return sum(self.dead_again.values())


def finish_retries(
    conn: Connection,
    run_id: int,
    failures: dict[tuple[str, int], list[dict[str, Any]]],
    redact: Any = str,
) -> RetryOutcome:
    """In the run's commit: each dead letter the run claimed is retried (done), dead again
    (its new error, attempts + 1, the value it was retried with, published again), or, held
    back behind a failed record of its key or partition, requested again for the next plan."""
    outcome = RetryOutcome()
    failed = {(t, p, f["offset"]): f for (t, p), found in failures.items() for f in found}
    claimed = conn.execute(
        text(
            'SELECT id, topic, partition, "offset", level FROM dead_letters '
            "WHERE retry_run_id = :r AND retried_at IS NULL ORDER BY id"
        ),
        {"r": run_id},
    ).all()
    for row in claimed:
        failure = failed.get((row.topic, row.partition, row.offset))
        if failure is None:
            conn.execute(
                text("UPDATE dead_letters SET retried_at = now() WHERE id = :i"), {"i": row.id}
            )
            outcome.retried[row.level] = outcome.retried.get(row.level, 0) + 1
        elif failure["held_back"]:
            conn.execute(
                text("UPDATE dead_letters SET retry_run_id = NULL WHERE id = :i"), {"i": row.id}
            )
            outcome.waiting[row.level] = outcome.waiting.get(row.level, 0) + 1
        else:
            # the record as the handler got it this time (the fixed value, if one was given)
            conn.execute(
                text(
                    "UPDATE dead_letters SET error = :e, attempts = attempts + 1, key = :k, "
                    "value = :v, headers = CAST(:h AS jsonb), retry_value = NULL, "
                    "retry_requested_at = NULL, retry_run_id = NULL, run_id = :r, "
                    "dlq_published_at = NULL, created_at = now() WHERE id = :i"
                ),
                {
                    "e": redact(failure["error"] or ""),
                    "k": failure["key"],
                    "v": failure["value"],
                    "h": json.dumps(failure["headers"] or []),
                    "r": run_id,
                    "i": row.id,
                },
            )
            outcome.dead_again[row.level] = outcome.dead_again.get(row.level, 0) + 1
    return outcome
