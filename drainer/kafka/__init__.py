"""Everything that talks to Kafka (confluent-kafka): one `KafkaSession` per run or command
(`session`: topics, watermarks, timestamps, consumer group offsets, its clients), how clients
are configured and their errors read (`clients`), producing (`producer`), the mirror of committed
offsets into consumer groups (`mirror`) and recreated topics (`topic_identity`).

Postgres stays the source of truth; this package reads Kafka to plan and writes Kafka only to
mirror progress and publish dead letters.
"""
