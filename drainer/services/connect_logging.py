"""The local Spark Connect server's logging: what its log4j2 keeps, where, and for how long."""

from __future__ import annotations

from pathlib import Path

from drainer.config.kafka_clients import known_secrets, redact

# Spark's default logging, less the Spark Connect service's INFO lines: they print whole requests
# (`Found execution ExecuteInfo(...)`, every 30 s for an abandoned one), and a request's plan
# holds the pickled executor, whose closure holds the sink's database URL and its password.
# INFO goes to a log that rolls over, as the broker's does: Spark logs every task, and a
# server that lives for months wrote gigabytes (4.4 GB here in a day of benchmarks) that each
# start once read whole; warnings also go to the console log. The Kafka clients' INFO lines
# are left out too: Spark's cached consumers seek before every fetch, and each seek logged two
# lines (~11,600 lines per 1M-record run, 42 MB of a 50 MB log), rolling job history away.
LOG_ROLL_SIZE = "50MB"
LOG_ROLLS = 3


def log4j2(server_log: Path) -> str:
    """The server's log4j2.properties."""
    return f"""\
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = {_LOG_PATTERN}
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {server_log}
appender.file.filePermissions = rw-------
appender.file.filePattern = {server_log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = {_LOG_PATTERN}
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = {LOG_ROLL_SIZE}
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = {LOG_ROLLS}
logger.connect.name = org.apache.spark.sql.connect
logger.connect.level = warn
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.kafka.name = org.apache.kafka
logger.kafka.level = warn
"""


_LOG_PATTERN = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"


def redact_log(log: Path) -> None:
    """Blank the secrets out of a server log: a server of an older drainer wrote whole
    requests into Spark's log, and pyspark's foreachBatch worker prints its Connect URL, token
    and all, to the server's console. Read line by line (a console log holds a server's whole
    life), rewritten only when a line held a secret."""
    if not log.exists():
        return
    secrets = known_secrets()
    staged = log.with_name(f"{log.name}.redacting")
    staged.unlink(missing_ok=True)
    staged.touch(mode=0o600)  # owner-only from the first line, as the log itself
    changed = False
    with (
        log.open(errors="surrogateescape") as lines,
        staged.open("w", errors="surrogateescape") as out,
    ):
        for line in lines:
            if any(secret in line for secret in secrets):
                line = redact(line, secrets)
                changed = True
            out.write(line)
    if changed:
        staged.replace(log)
    else:
        staged.unlink()
    log.chmod(0o600)


def roll_console_log(log: Path) -> None:
    """Keep the last server's console output, its secrets blanked, as `<log>.1` (one
    generation), so the next server writes a new log. Appended to forever, the console log had
    grown to 334 MB here, and every start read it whole to redact it."""
    redact_log(log)
    if log.exists():
        log.replace(log.with_name(f"{log.name}.1"))
