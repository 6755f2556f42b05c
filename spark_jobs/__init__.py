"""The Spark side of drainer: bounded Kafka range reads, processing modes, sinks, the job entry."""
