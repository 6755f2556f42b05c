"""The Postgres sink: a table in the drainer's own database, published inside the commit.

Spark tasks stage each run's rows in a table of its own (`<table>_r<run id>`, drainer.store.sink_tables);
the commit transaction attaches that stage to the target as the run's partition (or copies the
rows in), so the rows, the offsets and the offset map commit together or not at all. Upkeep
folds the run partitions so their count stays logarithmic in the runs (postgres_folds).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url

from drainer.config.sink_models import PostgresSinkConfig
from drainer.sinks.base import Capabilities, Sink, SinkCommit, UpkeepReport
from drainer.sinks.postgres_folds import AFTER_COMMIT_STEPS, UPKEEP_FOLD_BYTES, fold_sink
from drainer.sinks.upsert import upsert_spec
from drainer.store import dead_letters, sink_tables, upserts
from drainer.store.runs import StoredRun

log = logging.getLogger(__name__)


class PostgresSink(Sink[PostgresSinkConfig]):
    type = "postgres"
    capabilities = Capabilities(commit="in_postgres")

    @property
    def table(self) -> str:
        return self.config.table

    def location(self) -> str:
        return self.table

    def describe(self) -> str:
        return f"Postgres table {self.table}"

    def upkeep_words(self) -> str | None:
        return f"folds the partitions of {self.describe()}"

    def uri(self) -> str:
        """`postgres://host:port/database/public/table` (OpenLineage's naming), no user: the
        table is a plain name in drainer's database, on its search path's default schema."""
        url = make_url(self.settings.database_url)
        return (
            f"postgres://{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}/"
            f"public/{self.table}"
        )

    def prepare_attempt(
        self, conn: Connection, run: StoredRun, read_from: Mapping[tuple[str, int], int]
    ) -> None:
        sink_tables.clear_staged(conn, self.table, run.id)
        dead_letters.clear_failures(conn, run.id)

    def publish(self, conn: Connection, run_id: int, commit: SinkCommit | None) -> int:
        spec = upsert_spec(self.config)
        if spec is not None:  # a state table: the stage merged by key
            counts = upserts.merge_staged(conn, self.table, run_id, spec.keys, spec.order)
            log.info("run %d merged into %s: %s", run_id, self.table, counts.as_dict())
            upserts.store_counts(conn, run_id, counts)  # status and Dagster metadata show them
            return counts.inserted + counts.updated + counts.deleted
        return sink_tables.publish_staged(conn, self.table, run_id)

    def discard(self, conn: Connection, run_id: int) -> None:
        sink_tables.drop_staged(conn, self.table, run_id)

    def upkeep(self, engine: Engine) -> UpkeepReport:
        return fold_sink(
            engine, self.table, max_steps=AFTER_COMMIT_STEPS, max_bytes=UPKEEP_FOLD_BYTES
        )

    def maintain(self, engine: Engine) -> UpkeepReport:
        spec = upsert_spec(self.config)
        if spec is not None:  # delete markers past their retention
            with engine.begin() as conn:
                upserts.remove_markers(conn, self.table, spec.retention_ms)
        return fold_sink(engine, self.table)

    def staged_rows(self, conn: Connection, run_id: int) -> int:
        """Rows the run has staged so far (fault injection: crash while the tasks write)."""
        return sink_tables.staged_rows(conn, self.table, run_id)
