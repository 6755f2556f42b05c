"""One SparkSession per process, with the Kafka connector as local jar files.

The connector jars are resolved with Maven (`drainer services up`) rather than Spark's own Ivy
resolver, which ignores Maven's settings and mirrors.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from drainer.services import spark_kafka_jars
from drainer.settings import Settings, load_settings


def get_spark(settings: Settings | None = None) -> SparkSession:
    settings = settings or load_settings()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # workers must run this interpreter, where drainer and the user's handlers are installed
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if settings.spark_master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, no LAN lookups
    jars = ",".join(str(path) for path in spark_kafka_jars(settings.home))
    builder = (
        SparkSession.builder.appName("drainer")
        .master(settings.spark_master)
        .config("spark.jars", jars)
        .config("spark.driver.memory", os.environ.get("DRAINER_SPARK_DRIVER_MEMORY", "2g"))
        # small batches on few cores: 200 shuffle partitions would be mostly overhead
        .config("spark.sql.shuffle.partitions", os.environ.get("DRAINER_SHUFFLE_PARTITIONS", "8"))
        .config("spark.ui.enabled", os.environ.get("DRAINER_SPARK_UI", "false"))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        # progress bars interleave with the CLI's and Dagster's output; the UI has the detail
        .config("spark.ui.showConsoleProgress", "false")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("DRAINER_SPARK_LOG_LEVEL", "WARN"))
    return spark
