"""One SparkSession per process, with the Kafka connector as local jar files.

The connector jars are resolved with Maven (`drainer services up`) rather than Spark's own Ivy
resolver, which ignores Maven's settings and mirrors.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from drainer.kafka_security import SPARK_REDACTION_REGEX
from drainer.services import spark_kafka_jars
from drainer.settings import Settings, export_spark_python_env, load_settings


def get_spark(settings: Settings | None = None) -> SparkSession:
    settings = settings or load_settings()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # workers must run this interpreter, where drainer and the user's handlers are installed
    export_spark_python_env(local_master=settings.spark_master.startswith("local"))
    jars = ",".join(str(path) for path in spark_kafka_jars(settings.home))
    builder = (
        SparkSession.builder.appName("drainer")
        .master(settings.spark_master)
        .config("spark.jars", jars)
        .config("spark.driver.memory", settings.spark_driver_memory)
        # small batches on few cores: 200 shuffle partitions would be mostly overhead
        .config("spark.sql.shuffle.partitions", settings.spark_shuffle_partitions)
        .config("spark.ui.enabled", settings.spark_ui)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        # progress bars interleave with the CLI's and Dagster's output; the UI has the detail
        .config("spark.ui.showConsoleProgress", "false")
        # SASL's generated JAAS line and inline PEM keys are secrets too (plan text, UI, logs)
        .config("spark.redaction.regex", SPARK_REDACTION_REGEX)
        .config("spark.sql.redaction.options.regex", SPARK_REDACTION_REGEX)
    )
    spark = builder.getOrCreate()
    spark.conf.set("spark.sql.redaction.options.regex", SPARK_REDACTION_REGEX)
    spark.sparkContext.setLogLevel(settings.spark_log_level)
    return spark
