"""The Kafka topic id of each level topic a drain reads: how a recreated topic is recognised.

A topic deleted and created again under the same name starts its offsets from 0 with a new id;
committed offsets of the old topic mean nothing there, so a changed id stops the drain until an
audited `drainer rewind` accepts the new topic (`drainer.lifecycle.topic_identity`).
"""

from __future__ import annotations

from sqlalchemy import Connection, text


def topic_ids(conn: Connection, drain: str) -> dict[str, str]:
    """topic -> the Kafka topic id recorded for it."""
    rows = conn.execute(
        text("SELECT topic, topic_id FROM drain_topics WHERE drain = :d"), {"d": drain}
    )
    return {r.topic: r.topic_id for r in rows}


def record_topic_id(conn: Connection, drain: str, topic: str, topic_id: str) -> None:
    conn.execute(
        text(
            "INSERT INTO drain_topics (drain, topic, topic_id) VALUES (:d, :t, :i) "
            "ON CONFLICT (drain, topic) DO UPDATE SET topic_id = :i, recorded_at = now()"
        ),
        {"d": drain, "t": topic, "i": topic_id},
    )
