"""Everything that talks to Kafka (confluent-kafka): one `KafkaSession` per run or command
(`session`: its clients, topics, watermarks), reading a few records' timestamps and sizes
(`record_reads`), consumer group offsets (`consumer_groups`), how clients are configured and their
errors read (`clients`) and producing (`producer`). It talks to Kafka only: the steps that also
read or write Postgres (the offset mirror, recreated topics) are lifecycle steps
(drainer.lifecycle.mirror, drainer.lifecycle.topic_identity).
"""
