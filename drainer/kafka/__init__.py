"""Everything that talks to Kafka (confluent-kafka): one `KafkaSession` per run or command
(`session`: its clients, topics, watermarks), reading a few records' timestamps and sizes
(`record_reads`), consumer group offsets (`consumer_groups`), how clients are configured and their
errors read (`clients`), producing (`producer`), the mirror of committed offsets into consumer
groups (`mirror`) and recreated topics (`topic_identity`).

Postgres stays the source of truth; this package reads Kafka to plan and writes Kafka only to
mirror progress and publish dead letters.
"""
