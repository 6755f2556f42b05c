"""The Delta sink, Spark side: a run's output appended once, tagged with the run.

Writer options `txnAppId` (the drain) and `txnVersion` (the run id) make Delta itself skip a
repeated write of the same run; `userMetadata` names the run in the table's history, where a
resumed run finds the commit (`committed`) and then writes nothing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from drainer.errors import CommitProofLost, ConfigError, DrainBusy
from drainer.lifecycle.results import RunContext
from drainer.sinks import SinkCommit
from drainer.sinks.delta import DeltaSink
from drainer.sinks.delta_log import CommitInfo, latest_commits
from drainer.sinks.upsert import counts_of_merge
from spark_jobs.own_session import own_settings
from spark_jobs.session import DELTA_SNAPSHOT_PARTITIONS, shares_files
from spark_jobs.sinks.base import (
    ATTEMPT_PROPERTY,
    NONCE_PROPERTY,
    SparkSink,
    check_extension,
    fit_schema,
    marker,
    missing_table,
    no_signal,
    note_columns_added,
    run_of,
)
from spark_jobs.sinks.faults import crash_once_files_appear
from spark_jobs.sinks.upsert import drop_old_markers

log = logging.getLogger(__name__)

DELTA_RETRIES = 3
# the waits between tries, times the try's number: an append tries again soon; maintenance
# waits for a killed run's write, which the Spark server takes seconds to finish
APPEND_BACKOFF_S = 0.5
MAINTAIN_BACKOFF_S = 2.0
# a concurrent writer's commit came first: the same write again is safe (txnAppId/txnVersion);
# the second is the message of Delta's protocol and metadata conflicts, as when two writers
# create the table in an empty folder (a resumed run and its crashed attempt's write)
_DELTA_CONFLICTS = ("Concurrent", "concurrent update")
# commits looked through for the write a run just made before its whole history is: 300
# versions took 0.24-0.32 s to list whole, 0.15 s for the latest 5 (benchmarks/README.md)
RECENT_COMMITS = 10
# Delta's VACUUM lists the table's folders in this many tasks (Spark's default: 10,000), however
# few the folders are: on a local master that is 10,000 tasks on this machine's cores, ~40 s for
# a table of 8 files. A local master lists in as many tasks as it shuffles into (drainer's
# local default: 8); a cluster keeps its own setting.
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"

T = TypeVar("T")


def retried_on_conflict(what: str, where: str, call: Callable[[], T]) -> T:
    """Table maintenance's `call`, tried again when another writer's commit conflicts with it:
    a killed run's write that the Spark server still finishes, which commits under `drainer
    maintain` (its lease is the drain's; the server finishes the write of a client that
    died). After `DELTA_RETRIES` tries, one line; nothing of it landed."""
    try:
        return conflicts_retried(what, where, call, MAINTAIN_BACKOFF_S)
    except Exception as err:
        if not _conflict(err):
            raise
        raise DrainBusy(
            f"{what} of {where} conflicted with other writes to the table {DELTA_RETRIES} "
            "times (a run's write still finishing on the Spark server?); nothing of it "
            "landed: run `drainer maintain` again"
        ) from None


def conflicts_retried(what: str, where: str, call: Callable[[], T], backoff_s: float) -> T:
    """`call`, tried up to `DELTA_RETRIES` times while another writer's commit conflicts with
    it, waiting `backoff_s` times the try's number between tries; each try starts from the
    table's latest version. The last conflict is raised as it came."""
    for try_ in range(1, DELTA_RETRIES + 1):
        try:
            return call()
        except Exception as err:
            if try_ == DELTA_RETRIES or not _conflict(err):
                raise
            log.warning(
                "%s of %s conflicted with another write (try %d): retrying", what, where, try_
            )
            time.sleep(backoff_s * try_)
    raise AssertionError("unreachable")


def _conflict(err: BaseException) -> bool:
    return any(c in str(err) for c in _DELTA_CONFLICTS)


def app_id(drain: str, nonce: str | None = None) -> str:
    """Delta's transaction app id: per run (its nonce), so the table's own record of the run's
    transaction, which log clean-up keeps in every checkpoint, proves that run alone."""
    return f"drainer:{drain}" if nonce is None else f"drainer:{drain}:{nonce}"


class DeltaSparkSink(DeltaSink, SparkSink):
    def prepare(self, spark: SparkSession, drain: str) -> None:
        check_extension(spark, self, drain)
        self.check_writable()

    def committed(self, spark: SparkSession, ctx: RunContext) -> SinkCommit | None:
        return self._commit_of(spark, *run_of(ctx)[:3])

    def write(self, spark: SparkSession, ctx: RunContext, out: DataFrame) -> SinkCommit:
        return self.write_signalled(spark, ctx, out, no_signal)

    def write_signalled(
        self, spark: SparkSession, ctx: RunContext, out: DataFrame, landed: Callable[[], None]
    ) -> SinkCommit:
        """The append, `landed` called as soon as it is committed: the history lookup that
        proves it (0.1-0.2 s, more while other tables write) need not hold up a routed run's
        other tables."""
        spec = self.state_spec(ctx)
        if spec is not None:  # a state table: one MERGE per run
            from spark_jobs.sinks.delta_upsert import merge_delta

            merged = merge_delta(self, spark, ctx, out, spec)
            landed()
            return merged
        where = self.location()
        drain, run_id, nonce, attempt = run_of(ctx)
        existing = self._schema(spark)
        if existing is not None:  # mergeSchema adds them with the append
            # fit_schema passes new columns through: the output's own schema names them (no
            # second request to the server for the fitted plan's)
            have = existing.fieldNames()
            note_columns_added(ctx, [n for n in out.schema.fieldNames() if n not in have])
        out = fit_schema(out, existing, where)
        append = (
            out.write.format("delta")
            .mode("append")
            .option("mergeSchema", "true")
            .option("txnAppId", app_id(drain, nonce))
            .option("txnVersion", str(run_id))
            .option("userMetadata", marker(drain, run_id, nonce, attempt))
        )
        conflicts_retried("the run's append", where, lambda: append.save(where), APPEND_BACKOFF_S)
        landed()
        # the write just made is among the latest commits unless Delta skipped it (an earlier
        # attempt's landed) or other writers came after: only then is the whole history read
        done = self._commit_of(spark, drain, run_id, nonce, latest=RECENT_COMMITS)
        if done is None:
            done = self._commit_of(spark, drain, run_id, nonce)
        if done is None and nonce is not None:
            # Delta skipped the write: this run's own transaction is on the table, so an
            # earlier attempt landed, but the history that named its version is gone
            raise CommitProofLost(
                f"Delta skipped run {run_id}'s write to {where}: the table already records this "
                f"run's transaction (app id {app_id(drain, nonce)}), so an earlier attempt's "
                "write landed, but the table's history no longer shows it (log clean-up, "
                "delta.logRetentionDuration) and drainer has no record of it. Nothing was "
                "written twice. Check the table for rows of this run's ranges; `drainer status` "
                "shows them. Run again once the table's history is restored, or abandon the "
                "plan only if its rows are not in the table"
            )
        if done is None:
            raise ConfigError(
                f"Delta skipped the write of run {run_id} to {where}: its transaction for app "
                f"id {app_id(drain)} is already at or past version {run_id}, so the table has "
                "seen this drain from another drainer database (was the database reset?). "
                "Nothing was committed: point sink.path at a new table, or drop the old one"
            )
        return done

    def maintain_table(
        self, spark: SparkSession, retention_hours: float, force: bool
    ) -> dict[str, Any]:
        """OPTIMIZE (compaction), then VACUUM of files unreferenced for longer than the retention."""
        where = self.location()
        local = str(spark.conf.get("spark.master", "")).startswith("local")
        with own_settings(spark) as upkeep:  # `spark` is shared by runs and other maintains
            # a long log replays faster in the shuffle's tasks than in a run's (at most the
            # cores): OPTIMIZE and VACUUM on two cores, 2.78 s with 8, 3.14 s with 2
            # (benchmarks/README.md, `delta_log_replay`)
            shuffle = self.settings.shuffle_partitions
            upkeep.conf.set(DELTA_SNAPSHOT_PARTITIONS, shuffle)
            markers = retried_on_conflict(
                "the delete markers' clean-up",
                where,
                lambda: drop_old_markers(upkeep, f"delta.`{where}`", self.config),
            )
            optimized = retried_on_conflict(
                "OPTIMIZE", where, lambda: upkeep.sql(f"OPTIMIZE delta.`{where}`").collect()
            )
            metrics = optimized[0]["metrics"] if optimized else None
            if force:  # Delta itself refuses a retention below its default (7 days) otherwise
                upkeep.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
            if local:
                upkeep.conf.set(LISTING_PARALLELISM, shuffle)
            upkeep.sql(f"VACUUM delta.`{where}` RETAIN {retention_hours:g} HOURS").collect()
        return {
            "format": "delta",
            "location": where,
            "files_removed": int(metrics["numFilesRemoved"]) if metrics else 0,
            "files_added": int(metrics["numFilesAdded"]) if metrics else 0,
            "retention_hours": retention_hours,
            **({"delete_markers_removed": markers} if markers else {}),
        }

    def crash_while_writing(self, ctx: RunContext) -> None:
        crash_once_files_appear(self.data_folder())

    def _history(self, spark: SparkSession, latest: int | None = None) -> DataFrame | None:
        """The table's commits (the `latest` ones only: Delta reads one log file per commit,
        so the whole history costs more the longer the table lives)."""
        limit = "" if latest is None else f" LIMIT {latest}"
        try:
            history = spark.sql(f"DESCRIBE HISTORY delta.`{self.location()}`{limit}")
            history.schema  # noqa: B018  (analysis: fails here when there is no table)
            return history
        except Exception as err:
            if missing_table(err):
                return None
            raise

    def _commit_of(
        self,
        spark: SparkSession,
        drain: str,
        run_id: int,
        nonce: str | None = None,
        latest: int | None = None,
    ) -> SinkCommit | None:
        """The run's commit, newest first, among the table's `latest` commits (None: its whole
        history); None when no commit names the run. The latest few of a table whose files
        Spark shares with this machine are read from its log folder (`delta_log`)."""
        folder = self.data_folder()
        if latest is not None and folder is not None and shares_files(spark, self.settings):
            commits = latest_commits(folder, latest)  # newest first: read until the run's
            try:
                found = next((c for c in commits if _names_run(c, drain, run_id, nonce)), None)
            except OSError as err:  # unreadable here: Spark reads it
                log.debug("the log of %s is not readable here (%s): asking Spark", folder, err)
            else:
                return None if found is None else self._sink_commit(found)
        history = self._history(spark, latest)
        if history is None:
            return None
        meta = F.col("userMetadata")
        if nonce is None:  # planned before nonces: its commit's marker names drain and run
            wanted = meta == marker(drain, run_id)
        else:
            wanted = F.get_json_object(meta, f"$['{NONCE_PROPERTY}']") == nonce
        rows = history.where(wanted).select("version", "operationMetrics", "userMetadata").collect()
        if not rows:
            return None
        row = rows[0]
        return self._sink_commit(
            CommitInfo(int(row["version"]), row["operationMetrics"] or {}, row["userMetadata"])
        )

    def _sink_commit(self, commit: CommitInfo) -> SinkCommit:
        """The run's commit as drainer records it: its version, what it wrote, the attempt its
        marker names and, for a state table's merge, the counts the marker carries
        (spark_jobs.sinks.delta_upsert) completed from the commit's metrics."""
        metrics = commit.metrics
        meta = _marker_of(commit.user_metadata)
        upsert = meta.get("upsert")
        return SinkCommit(
            "delta",
            self.location(),
            id=commit.version,
            rows=int(metrics.get("numOutputRows", 0) or 0),
            bytes=int(metrics.get("numOutputBytes", 0) or 0),
            files=int(metrics.get("numFiles", 0) or 0),
            attempt=int(meta.get(ATTEMPT_PROPERTY) or 0),
            details={"upsert": counts_of_merge(upsert, metrics)} if upsert else {},
        )

    def _schema(self, spark: SparkSession) -> StructType | None:
        """The table's schema, None before its first write (one request: no history lookup)."""
        try:
            return spark.read.format("delta").load(self.location()).schema
        except Exception as err:
            if missing_table(err):
                return None
            raise


def _marker_of(user_metadata: str | None) -> dict[str, Any]:
    """A commit's `userMetadata` as the marker it holds ({} when it holds none)."""
    try:
        found = json.loads(user_metadata or "")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _names_run(commit: CommitInfo, drain: str, run_id: int, nonce: str | None) -> bool:
    """Whether a commit's `userMetadata` is the run's marker (`_commit_of`'s condition)."""
    if nonce is None:  # planned before nonces: its commit's marker names drain and run
        return commit.user_metadata == marker(drain, run_id)
    return _marker_of(commit.user_metadata).get(NONCE_PROPERTY) == nonce
