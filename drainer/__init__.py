"""drainer: drain Kafka backlogs by priority, exactly once.

The core package. It imports neither dagster nor pyspark, so the CLI, the Spark job and the
Dagster definitions can all share it.
"""

__version__ = "0.1.0"
