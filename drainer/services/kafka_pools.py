"""Spark's two Kafka pools on a Connect server drainer starts: what each keeps, and for how long.

Both pools live in the server's JVM and outlast the runs that fill them, so their limits are
the server's memory (docs/operations.md, "The Connect server's Kafka pools").
"""

from __future__ import annotations

import hashlib

KAFKA_POOLS = {
    # consumers, pooled per (group id, partition): a drain's next run reuses its own (its
    # reads keep one group id, spark_jobs.kafka_source.spark_group). Spark keeps 64, which
    # made every run of a drain over many partitions connect again
    "spark.kafka.consumer.cache.capacity": "1024",
    # an idle consumer is closed after 6 minutes (Spark: 5), so a drain scheduled every 5
    # keeps its own whatever its run's length. Spark's evictor looks at 10 idle consumers a
    # run, once a minute: 15 minutes after 20 reads of 48 partitions, 860 of their 960
    # consumers were still open, the heap 417 MB live against 44 MB before the reads (each
    # consumer keeps what it fetched past its range; benchmarks/consumer_pool.py). Looking
    # once a second closes them on time
    "spark.kafka.consumer.cache.timeout": "6m",
    "spark.kafka.consumer.cache.evictorThreadRunInterval": "1s",
    # each read partition's last poll held 10 s, not 5 minutes: it is kept for a micro-batch
    # that goes on where the task stopped, which a bounded read never does
    "spark.kafka.consumer.fetchedData.cache.timeout": "10s",
    "spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval": "5s",
}

# on a server's `started_with` line: the pools it runs with. A server started with others (an
# older drainer's, Spark's evictor among them) is restarted by `drainer services up`
POOLS_MARK = (
    "kafka_pools=" + hashlib.sha256(repr(sorted(KAFKA_POOLS.items())).encode()).hexdigest()[:8]
)
