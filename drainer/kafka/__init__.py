"""Everything that talks to Kafka (confluent-kafka): watermarks, timestamps, group offsets,
topics, producing, and the mirror of committed offsets into consumer groups.

Postgres stays the source of truth; this package reads Kafka to plan and writes Kafka only to
mirror progress and publish dead letters.
"""
