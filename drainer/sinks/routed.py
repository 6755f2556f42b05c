"""A routed sink, driver side: one drain's output in many tables of one format, one run exactly
once across them (drainer.config.routing names the tables).

A routed sink is its format's sink once per table: each table is written, proven and kept by
that format's own sink made for it (`table`), so a Delta table keeps its txnAppId, an Iceberg
table its run branch, a Postgres table its stage. What is routed's own:

- the drain's tables are registered (drainer.store.route_tables) before a run writes them, so
  the commit publishes, `drainer maintain` keeps and a resumed run knows every one;
- a format that commits first commits table by table, then the run's one Postgres commit
  records them all (`SinkCommit.details["tables"]`); a resumed run asks each table for its own
  proof and writes only those without one (spark_jobs.sinks.routed);
- Postgres stages every table, and the commit transaction publishes every stage of the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine

from drainer.config.route_models import NAME_FIELDS
from drainer.config.routing import router
from drainer.settings import Settings
from drainer.sinks.base import Sink, SinkCommit, UpkeepReport
from drainer.store import route_tables
from drainer.store.runs import StoredRun


class RoutedSink(Sink[Any]):
    """The sink of a routed configuration: `table(name)` is its format's sink for one table.

    Subclassed per format by `routed_class` (its `type` and `capabilities` are the format's)."""

    single: type[Sink[Any]]

    def __init__(self, config: Any, settings: Settings, drain: str = "") -> None:
        super().__init__(config, settings)
        self.drain = drain
        routing = router(config)
        assert routing is not None, "a routed sink needs a template or a route"
        self.router = routing
        # the format's sink as configured (a template's name; a route's default, or its first
        # table): its catalog, jars, checks, the URI an orchestrator's asset gets
        route = config.route
        if route is None:
            self.base = self.single(config, settings)
        else:
            named = route.default or sorted(route.tables.values())[0]
            field = NAME_FIELDS[config.type]
            self.base = self.single(config.model_copy(update={field: named}), settings)

    def table(self, name: str) -> Sink[Any]:
        """The format's own sink for one routed table."""
        field = NAME_FIELDS[self.type]
        return self.single(
            self.config.model_copy(update={field: name, "route": None}), self.settings
        )

    def tables(self, conn: Connection) -> list[Sink[Any]]:
        return [self.table(n) for n in route_tables.registered(conn, self.drain)]

    # where it lives

    def location(self) -> str:
        """The template, or `by <column>` for a route: what names the tables."""
        route = self.config.route
        if route is None:
            return self.base.location()
        return f"{{{route.by}}} -> " + ", ".join(
            [
                *(f"{v}: {t}" for v, t in route.tables.items()),
                *([f"*: {route.default}"] if route.default else []),
            ]
        )

    def describe(self) -> str:
        return f"{self.type} tables routed by {', '.join(self.router.columns)}: {self.location()}"

    def uri(self) -> str:
        return self.base.uri()

    def data_folder(self) -> Path | None:
        """The folder every table's files are under: the template's folder up to its first slot
        (`lake/{event_type}` -> `<warehouse>/lake`); None when the tables share none."""
        folder = self.base.data_folder()
        if folder is None or "{" not in str(folder):
            return None
        head = str(folder).split("{", 1)[0]  # `<warehouse>/lake/` or `<warehouse>/lake/t_`
        return Path(head) if head.endswith("/") else Path(head).parent

    def session_key(self) -> str:
        return self.base.session_key()

    def session_conf(self) -> dict[str, str]:
        return self.base.session_conf()

    def check_writable(self) -> None:
        self.base.check_writable()

    # a run, driver side

    def prepare_attempt(
        self, conn: Connection, run: StoredRun, read_from: Mapping[tuple[str, int], int]
    ) -> None:
        self.base.prepare_attempt(conn, run, read_from)  # the run's own failures
        for sink in self.tables(conn):
            sink.prepare_attempt(conn, run, read_from)

    def publish(self, conn: Connection, run_id: int, commit: SinkCommit | None) -> int:
        if self.capabilities.commit == "before_postgres":
            return 0 if commit is None else commit.rows
        published = {
            name: self.table(name).publish(conn, run_id, None)
            for name in route_tables.registered(conn, self.drain)
        }
        route_tables.store_rows(conn, run_id, published)  # what `drainer status` shows per table
        return sum(published.values())

    def discard(self, conn: Connection, run_id: int) -> None:
        self.base.discard(conn, run_id)
        for sink in self.tables(conn):
            sink.discard(conn, run_id)

    def commit_line(self, commit: SinkCommit) -> str:
        tables = commit.details.get("tables") or {}
        each = ", ".join(
            f"{name} {self.capabilities.commit_id} {t.get('version')} ({t.get('rows_added')} rows)"
            for name, t in sorted(tables.items())
        )
        return f"{commit.format} commits to {len(tables)} tables: {each or 'none'}"

    def upkeep_words(self) -> str | None:
        words = self.base.upkeep_words()
        return None if words is None else f"{words}, for each routed table"

    def upkeep(self, engine: Engine) -> UpkeepReport:
        return self._each(engine, "upkeep")

    def maintain(self, engine: Engine) -> UpkeepReport:
        return self._each(engine, "maintain")

    def _each(self, engine: Engine, step: str) -> UpkeepReport:
        total = UpkeepReport(self.location())
        with engine.connect() as conn:
            sinks = self.tables(conn)
        for sink in sinks:
            report: UpkeepReport = getattr(sink, step)(engine)
            total.before += report.before
            total.after += report.after
            total.folds += report.folds
            total.runs_folded += report.runs_folded
        return total


@cache
def routed_class(single: type[Sink[Any]]) -> type[RoutedSink]:
    """The routed sink of a format: its type and capabilities, `single` per table."""
    return type(
        f"Routed{single.__name__}",
        (RoutedSink,),
        {"type": single.type, "capabilities": single.capabilities, "single": single},
    )


def table_commits(commits: Mapping[str, SinkCommit | None]) -> dict[str, Any]:
    """Per table, what a routed commit records and `drainer status` shows."""
    return {name: c.as_dict() for name, c in commits.items() if c is not None}


def rows_per_table(
    published: Mapping[str, int], commit: Mapping[str, Any] | None
) -> dict[str, int]:
    """A routed run's rows per table: those its Postgres commit recorded (`published`), else
    those its table commits carry (Delta, Iceberg); empty for a run of one table."""
    if published:
        return dict(published)
    tables = ((commit or {}).get("details") or {}).get("tables") or {}
    return {name: int(t.get("rows_added", 0)) for name, t in tables.items()}


__all__ = ["RoutedSink", "router", "routed_class", "rows_per_table", "table_commits"]
