"""The Iceberg sink, Spark side: a run's output published once, by write-audit-publish.

Iceberg has no transaction id, but it refuses to publish one write-audit-publish id twice: the
run appends to a branch of its own, tagged `wap.id=drainer:<drain>:<run>`, and cherry-picks
that snapshot onto `main`. A second publish of the run (an earlier attempt's write that the
Connect server finished after its client died, then published) fails in Iceberg's own commit
validation, so the table holds the run once even when two attempts race.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from drainer.config.kafka_clients import redact
from drainer.errors import CatalogUnavailable, CommitProofLost, ServiceError
from drainer.lifecycle.results import RunContext
from drainer.sinks import SinkCommit
from drainer.sinks.iceberg import IcebergSink
from spark_jobs.sinks.base import (
    ATTEMPT_PROPERTY,
    DRAIN_PROPERTY,
    NONCE_PROPERTY,
    RUN_PROPERTY,
    SparkSink,
    check_extension,
    fit_schema,
    missing_table,
    note_columns_added,
    run_of,
)
from spark_jobs.sinks.faults import crash_once_files_appear
from spark_jobs.sinks.upsert import drop_old_markers

log = logging.getLogger(__name__)

WAP_ID = "wap.id"  # Iceberg's summary key of a staged write; kept by a fast-forward publish
PUBLISHED_WAP_ID = "published-wap-id"  # set instead when the publish replays the snapshot
RUN_BRANCH_PREFIX = "drainer_run_"
# Iceberg's REST client lost the catalog at the HTTP level (refused, unknown host, timed out):
# the same words whether Spark Connect or Py4J carries the error; the cause follows in the trace
_REST_UNREACHABLE = re.compile(r"RESTException\W+Error occurred while processing \w+ request")
_REST_CAUSE = re.compile(r"Caused by: [\w.$]*?(\w+Exception: [^\n]*)")


def wap_id(drain: str, run_id: int, nonce: str | None = None) -> str:
    """The run's write-audit-publish id: Iceberg publishes a given id at most once; the nonce
    keeps a run id that a restored database reissues from matching an old one."""
    return f"drainer:{drain}:{run_id}" + ("" if nonce is None else f":{nonce}")


ORPHAN_MIN_AGE_HOURS = 24.0
"""Files no snapshot references are removed only past this age (and the retention), whatever
`--force` lowers the retention to: younger ones may belong to a write still in flight."""


class IcebergSparkSink(IcebergSink, SparkSink):
    def prepare(self, spark: SparkSession, drain: str) -> None:
        """The session was made with the catalog's settings (spark_jobs.session sets every
        configured sink's `session_conf`): checked, never set here on the shared session."""
        check_extension(spark, self, drain)
        for key, value in self.catalog_conf().items():
            if spark.conf.get(key, None) != value:
                raise ServiceError(
                    f"drain '{drain}' writes the Iceberg catalog {self.catalog}, but this Spark "
                    f"session was made without its settings ({key}): a session takes the "
                    "catalogs of the drains file it was made for; run the drain with the "
                    "drains file that defines it (DRAINER_CONFIG). Nothing was committed"
                )

    def committed(self, spark: SparkSession, ctx: RunContext) -> SinkCommit | None:
        found = self._commit_of(spark, *run_of(ctx)[:3])
        if found is None and ctx.attempt > 1 and ctx.run.planned_at is not None:
            self._check_history_reaches(spark, ctx)
        return found

    def _check_history_reaches(self, spark: SparkSession, ctx: RunContext) -> None:
        """No commit of the run on `main`: trustworthy only while the table's history since
        the plan is whole. A snapshot whose parent is gone and that is younger than the plan
        means something expired snapshots the run might have published (a catalog's own
        expiry: drainer's maintenance keeps an open plan's): stop, never write again."""
        try:
            snapshots = spark.table(f"{self.location()}.snapshots")
            live = snapshots.select(F.col("snapshot_id").alias("parent_id"))
            cut = (
                snapshots.where(F.col("parent_id").isNotNull())
                .join(live, "parent_id", "left_anti")
                .where(F.col("committed_at") > F.lit(ctx.run.planned_at))
                .limit(1)
                .collect()
            )
        except Exception as err:
            if missing_table(err):
                return
            raise
        if cut:
            raise CommitProofLost(
                f"run {ctx.run.id} of drain '{ctx.drain.name}' may have published to "
                f"{self.location()} in an earlier attempt, but snapshots younger than its plan "
                "were expired outside drainer (a catalog's own snapshot expiry?), so the table "
                "cannot say. Nothing was written twice: check the table for rows of the run's "
                "ranges before you run again or abandon the plan, and keep snapshots of open "
                "plans (docs/lakehouse.md)"
            )

    def write(self, spark: SparkSession, ctx: RunContext, out: DataFrame) -> SinkCommit:
        spec = self.state_spec(ctx)
        if spec is not None:  # a state table: one MERGE per run
            from spark_jobs.sinks.iceberg_upsert import merge_iceberg

            return merge_iceberg(self, spark, ctx, out, spec)
        table = self.location()
        drain, run_id, nonce, attempt = run_of(ctx)
        existing = self._schema(spark)
        if existing is None:
            namespace = table.rsplit(".", 1)[0]
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
            # created empty from the output's columns, so that the run's append is one snapshot
            try:
                spark.createDataFrame([], out.schema).writeTo(table).using("iceberg").create()
            except Exception as err:
                # another attempt of the run created it first (Spark's or Iceberg's own error)
                if "ALREADY_EXISTS" not in str(err) and "AlreadyExistsException" not in str(err):
                    raise
            existing = spark.table(table).schema
        # fit_schema passes new columns through as they are: read them off the output's own
        # schema, which it has just fetched, instead of asking the server about the fitted plan
        added = [f for f in out.schema.fields if f.name not in existing.fieldNames()]
        out = fit_schema(out, existing, table)
        note_columns_added(ctx, [f.name for f in added])
        if added:  # schema evolution: Iceberg adds columns by metadata, no data is rewritten
            columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in added)
            spark.sql(f"ALTER TABLE {table} ADD COLUMNS ({columns})")
            existing = spark.table(table).schema
            out = fit_schema(out, existing, table)
        done = self._publish_once(spark, ctx, out)
        if done is None:  # an earlier attempt published the run: its commit is the proof
            done = self._commit_of(spark, drain, run_id, nonce)
        if done is None:
            raise ServiceError(
                f"run {run_id}'s snapshot of {table} was published, but is not on the table's "
                "main branch (did another writer roll the table back?). Nothing was committed "
                "to Postgres: look at the table's history, then run again"
            )
        return done

    def maintain_table(
        self, spark: SparkSession, retention_hours: float, force: bool
    ) -> dict[str, Any]:
        """rewrite_data_files, then expire_snapshots older than the retention (their
        unreferenced files go with them), the branches crashed attempts left, and the data
        files no snapshot ever referenced (an interrupted write's: remove_orphan_files), once
        they are older than the retention and ORPHAN_MIN_AGE_HOURS."""
        catalog, table, where = self.catalog, self.table, self.location()
        markers = drop_old_markers(spark, where, self.config)
        rewritten = spark.sql(
            f"CALL {catalog}.system.rewrite_data_files(table => '{table}')"
        ).collect()
        older_than = (datetime.now(UTC) - timedelta(hours=retention_hours)).strftime(
            "%Y-%m-%d %H:%M:%S"
        )
        dropped = self._drop_stale_run_branches(spark, older_than)
        expired = spark.sql(
            f"CALL {catalog}.system.expire_snapshots(table => '{table}', "
            f"older_than => TIMESTAMP '{older_than}', retain_last => 1)"
        ).collect()
        orphans = self._remove_orphan_files(spark, max(retention_hours, ORPHAN_MIN_AGE_HOURS))
        row = rewritten[0] if rewritten else None
        return {
            "orphan_files_removed": orphans,
            "format": "iceberg",
            "location": where,
            "files_removed": int(row["rewritten_data_files_count"]) if row else 0,
            "files_added": int(row["added_data_files_count"]) if row else 0,
            "snapshots_expired_files": int(expired[0]["deleted_data_files_count"])
            if expired
            else 0,
            "run_branches_dropped": dropped,
            "retention_hours": retention_hours,
            **({"delete_markers_removed": markers} if markers else {}),
        }

    def _remove_orphan_files(self, spark: SparkSession, age_hours: float) -> int:
        """Remove files in the table's folder that no snapshot references, older than
        `age_hours`: a write still in flight (another engine's, since this drain's runs wait
        for its lease) has younger files; Iceberg's own default age is 3 days."""
        older_than = (datetime.now(UTC) - timedelta(hours=age_hours)).strftime("%Y-%m-%d %H:%M:%S")
        removed = spark.sql(
            f"CALL {self.catalog}.system.remove_orphan_files(table => '{self.table}', "
            f"older_than => TIMESTAMP '{older_than}')"
        ).collect()
        return len(removed)

    def known_failure(self, err: BaseException, drain: str) -> CatalogUnavailable | None:
        """The drain's own catalog did not answer, as one line naming it and its uri. Spark's
        error names neither the catalog nor the setting, only a GET that failed."""
        catalog = self.config.catalog
        text = str(err)
        if catalog is None or not _REST_UNREACHABLE.search(text):
            return None
        cause = _REST_CAUSE.search(text)
        why = cause.group(1).strip() if cause else "no answer"
        return CatalogUnavailable(
            redact(
                f"the Iceberg catalog '{catalog.name}' of drain '{drain}' did not answer at "
                f"sink.catalog.uri {catalog.uri} ({why}). Nothing was committed: start the "
                f"catalog there, or correct sink.catalog.uri in the drains file, then `drainer "
                f"run {drain}` again: the run resumes with the same ranges."
            )
        )

    def crash_while_writing(self, ctx: RunContext) -> None:
        crash_once_files_appear(self.data_folder())

    def _commit_of(
        self, spark: SparkSession, drain: str, run_id: int, nonce: str | None = None
    ) -> SinkCommit | None:
        """The run's published snapshot: on `main`'s line, by its WAP id (or, for snapshots
        written before WAP publishing, by its run property); a staged or branch snapshot does
        not count."""
        table, wap = self.location(), wap_id(drain, run_id, nonce)
        summary = F.col("summary")
        # a run planned before nonces also matches its commit's run property (older commits)
        legacy = (summary[RUN_PROPERTY] == str(run_id)) & (summary[DRAIN_PROPERTY] == drain)
        try:  # loaded from the catalog itself (not a listing): a table another client made too
            spark.catalog.refreshTable(table)
            rows = (
                spark.table(f"{table}.history")
                .where(F.col("is_current_ancestor"))
                .join(spark.table(f"{table}.snapshots"), "snapshot_id")
                .where(
                    (summary[WAP_ID] == wap)
                    | (summary[PUBLISHED_WAP_ID] == wap)
                    | (legacy if nonce is None else F.lit(False))
                )
                .select("snapshot_id", "summary")
                .collect()
            )
        except Exception as err:
            if missing_table(err):
                return None
            raise
        if not rows:
            return None
        return _table_commit(table, int(rows[0]["snapshot_id"]), rows[0]["summary"] or {})

    def _schema(self, spark: SparkSession) -> StructType | None:
        try:
            return spark.table(self.location()).schema
        except Exception as err:
            if missing_table(err):
                return None
            raise

    def _publish_once(
        self, spark: SparkSession, ctx: RunContext, out: DataFrame
    ) -> SinkCommit | None:
        """Append on a branch of this attempt's own, then cherry-pick it onto main, once.

        The attempt's branch keeps a write the Connect server finishes for a dead client off
        main; the cherry-pick is where Iceberg checks that the run's WAP id is not published
        yet, in the commit itself, so two attempts of a run cannot both land. Returns the
        commit made (the snapshot the cherry-pick left on main, with the branch head's
        summary: a replayed snapshot adds the same files), or None when an earlier attempt
        had published the run already.
        """
        drain, run_id, nonce, attempt = run_of(ctx)
        table, wap = self.location(), wap_id(drain, run_id, nonce)
        branch = f"{RUN_BRANCH_PREFIX}{run_id}_{uuid.uuid4().hex[:8]}"
        alter_iceberg(spark, table, f"CREATE BRANCH {branch}")
        try:
            (
                out.writeTo(f"{table}.branch_{branch}")
                .option(f"snapshot-property.{WAP_ID}", wap)
                .option(f"snapshot-property.{RUN_PROPERTY}", str(run_id))
                .option(f"snapshot-property.{DRAIN_PROPERTY}", drain)
                .option(f"snapshot-property.{NONCE_PROPERTY}", nonce or "")
                .option(f"snapshot-property.{ATTEMPT_PROPERTY}", str(attempt))
                .append()
            )
        except Exception as err:
            # only an attempt of this run that published it (or found it published) drops this
            # run's branches, which a resumed attempt racing the crashed one's write can do
            # while this one appends: the caller then finds that commit
            if "Branch does not exist" not in str(err):
                raise
            _branch_dropped(run_id)
            return None
        # this run's branches (this attempt's, and any a crashed attempt left) with their heads'
        # summaries, looked up once: the cherry-pick below changes main, not them
        mine = (
            spark.table(f"{table}.refs")
            .where(F.col("name").startswith(f"{RUN_BRANCH_PREFIX}{run_id}_"))
            .join(spark.table(f"{table}.snapshots"), "snapshot_id")
            .select("name", "snapshot_id", "summary")
            .collect()
        )
        head = next((row for row in mine if row["name"] == branch), None)
        if head is None:  # dropped by another attempt after its publish, as above
            _branch_dropped(run_id)
            return None
        try:
            (picked,) = spark.sql(
                f"CALL {self.catalog}.system.cherrypick_snapshot(table => '{self.table}', "
                f"snapshot_id => {head['snapshot_id']})"
            ).collect()
            done: SinkCommit | None = _table_commit(
                table, int(picked["current_snapshot_id"]), head["summary"] or {}
            )
        except Exception as err:
            if "DuplicateWAPCommitException" not in str(err) and "published already" not in str(
                err
            ):
                raise
            log.warning(
                "run %d: an earlier attempt already published its write to %s; this attempt's "
                "branch is dropped unpublished",
                run_id,
                table,
            )
            done = None
        # this run's branches hold nothing unpublished now
        for row in mine:
            drop_branch(spark, table, row["name"])
        return done

    def _drop_stale_run_branches(self, spark: SparkSession, older_than: str) -> int:
        """Drop the branches crashed attempts left (`drainer_run_<id>_*`, never published).

        A run drops its own branches when it publishes; one whose client died mid-write leaves
        the Connect server to finish the write onto a branch nobody publishes. Only branches
        older than the retention go, so the branch of a run writing right now is never touched.
        """
        where = self.location()
        stale = (
            spark.table(f"{where}.refs")
            .where(F.col("name").startswith(RUN_BRANCH_PREFIX))
            .join(spark.table(f"{where}.snapshots"), "snapshot_id")
            .where(F.col("committed_at") < F.lit(older_than).cast("timestamp"))
            .select("name")
            .collect()
        )
        for row in stale:
            drop_branch(spark, where, row["name"])
        return len(stale)


def _table_commit(table: str, snapshot_id: int, summary: dict[str, str]) -> SinkCommit:
    """A published snapshot as the run's proof, its numbers from the snapshot summary."""
    return SinkCommit(
        "iceberg",
        table,
        id=snapshot_id,
        rows=int(summary.get("added-records", 0) or 0),
        bytes=int(summary.get("added-files-size", 0) or 0),
        files=int(summary.get("added-data-files", 0) or 0),
        attempt=int(summary.get(ATTEMPT_PROPERTY, 0) or 0),
    )


def drop_branch(spark: SparkSession, table: str, branch: str) -> None:
    """Drop a branch that may be going away under us: the losing attempts of one run each drop
    all of its branches, and `IF EXISTS` is checked on the table as Spark loaded it, so a drop
    another attempt committed in between fails in Iceberg (the check and the drop are two
    steps). Gone is what we want."""
    try:
        alter_iceberg(spark, table, f"DROP BRANCH IF EXISTS {branch}")
    except Exception as err:
        if "Branch does not exist" not in str(err):
            raise
        log.info("%s: branch %s was dropped by another attempt first", table, branch)


def alter_iceberg(spark: SparkSession, table: str, change: str, tries: int = 5) -> None:
    """`ALTER TABLE table change`, again on a lost commit race: unlike a write, Iceberg's
    ALTER TABLE gives up when another commit (an append, a branch) came first."""
    for attempt in range(1, tries + 1):
        try:
            spark.sql(f"ALTER TABLE {table} {change}")
            return
        except Exception as err:
            if attempt == tries or "CommitFailedException" not in str(err):
                raise
            log.info("%s: %s lost a commit race (attempt %d): again", table, change, attempt)
            spark.catalog.refreshTable(table)
            time.sleep(0.2 * attempt)


def _branch_dropped(run_id: int) -> None:
    """An attempt's branch gone before its publish: only an attempt that published the run (or
    found it published) drops a running run's branches, so the caller looks up that commit."""
    log.warning("run %d: another attempt dropped this attempt's branch", run_id)
