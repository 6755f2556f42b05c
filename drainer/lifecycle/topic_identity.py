"""Recreated topics: a level topic deleted and created again under its name is not read on.

Kafka gives every topic a random id at creation. The drain records each level topic's id the
first time it plans over it; before every plan or resume the live ids are compared with the
recorded ones. A different id means the committed offsets (and an open plan's ranges) point
into a log that no longer exists, so the run stops with `TopicRecreated` naming the audited way
forward (`drainer rewind --to-earliest`, which records the new id), never skipping or
re-reading records silently.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine

from drainer.config import DrainConfig
from drainer.errors import TopicRecreated
from drainer.kafka.session import KafkaSession
from drainer.store import topics


def verify_topics(
    engine: Engine, drain: DrainConfig, kafka: KafkaSession, levels: list[int], open_plan: bool
) -> dict[str, str]:
    """The live topic ids of the levels; raises TopicRecreated where one changed."""
    names = {drain.level_topic(level): level for level in levels}
    kafka.partitions(levels)  # a missing topic: one TopicMissing naming it, before its id
    live = kafka.topic_ids(list(names))
    with engine.connect() as conn:
        known = topics.topic_ids(conn, drain.name)
    for topic, level in names.items():
        if topic in known and known[topic] != live[topic]:
            first = (
                f"end the open plan with `drainer plan abandon {drain.name} --reason TEXT`, then "
                if open_plan
                else ""
            )
            raise TopicRecreated(
                f"topic {topic} was deleted and created again (its topic id was {known[topic]}, "
                f"now {live[topic]}): the drain's committed offsets belong to the old topic, so "
                f"nothing was read. Check what happened, then {first}accept the new topic with "
                f"`drainer rewind {drain.name} --level {level} --to-earliest --reason TEXT` "
                "(drains it from its first record; audited)."
            )
    return live


def record_new_topics(conn: Connection, drain: str, live: dict[str, str]) -> None:
    """Record the ids of topics the drain had not seen yet (inside the plan's transaction)."""
    known = topics.topic_ids(conn, drain)
    for topic, topic_id in live.items():
        if topic not in known:
            topics.record_topic_id(conn, drain, topic, topic_id)
