"""A routed sink, Spark side: the run's output split by its route values, each table written by
its format's own sink, the run exactly once across them (drainer.sinks.routed says how).

One run reads its ranges once: the decoded records are kept (persisted) with their route key,
one aggregate over them finds the route keys (with each key's rows and non-null columns), and
the bad records' staging and each table's write read the kept rows. A processor's output is
kept and routed the same way.
The first table (in name order) commits alone, then the rest at once, started as soon as the
first's commit is in (`_write_tables`); a
resumed run asks each table for the run's proof (Delta's txn app id, Iceberg's published
snapshot) and writes only those without one.
Postgres stages every table and publishes them in the one commit transaction. Route values that
name no valid table, or one past `max_tables`, are bad records (`flag`), never written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from drainer import faults
from drainer.config.routing import Assignment, RouteKey
from drainer.errors import BadRecord
from drainer.lifecycle.results import RunContext
from drainer.sinks import SinkCommit
from drainer.sinks.routed import RoutedSink, table_commits
from drainer.store import route_tables
from drainer.store.leases import check_fence
from spark_jobs.attempts import at_once
from spark_jobs.bad_records import guarded
from spark_jobs.decode import BARRIER, ERROR, QUICK_ERROR
from spark_jobs.session import cores
from spark_jobs.sinks.base import SparkSink, no_signal

log = logging.getLogger(__name__)

_KEY = "_drainer_route_key"
# tables a run writes at once after its first: enough to keep a few cores busy through each
# write's driver round trips, few enough that a run routing to many tables does not flood the
# server's scheduler (Spark runs the jobs first come, first served)
TABLES_AT_ONCE = 4
# tables from which a run sorts its kept rows by route key before writing them (`_sorted`).
# Unsorted, each table's write scans every cached batch; sorted, only its own, but the sort
# costs a pass of its own. At 5 tables the unsorted run took 0.93x the sorted one (1M
# records, paired over 5 rounds: the sort cost more than the 4 extra scans); one scan of
# the cache is a fraction of the sort, so with many tables the scans cost more
SORTED_FROM = 10


@dataclass(frozen=True)
class Routes:
    """A run's routes: the assignment of its keys, each key's rows and non-null columns."""

    assignment: Assignment
    keys: dict[str, RouteKey]  # the key column's text (Spark's JSON) -> the key
    rows: dict[str, int]
    filled: dict[str, frozenset[str]]

    def keys_of(self, table: str) -> list[str]:
        """The key texts of the rows that go to `table`."""
        return sorted(t for t, k in self.keys.items() if self.assignment.tables.get(k) == table)

    def reason_of(self) -> Column:
        """Each row's reason for being a bad record, null for a row with a table."""
        pairs = [
            F.lit(x)
            for text, key in self.keys.items()
            if key in self.assignment.rejected
            for x in (text, self.assignment.rejected[key])
        ]
        return F.element_at(F.create_map(*pairs), F.col(_KEY)) if pairs else F.lit(None)

    def rows_of(self, table: str) -> int:
        return sum(
            self.rows[t] for t, k in self.keys.items() if self.assignment.tables.get(k) == table
        )

    def columns_of(self, table: str) -> frozenset[str]:
        found: set[str] = set()
        for text, key in self.keys.items():
            if self.assignment.tables.get(key) == table:
                found |= self.filled[text]
        return frozenset(found)


class RoutedSparkSink(RoutedSink, SparkSink):
    """A routed sink that Spark writes; `single` is its format's Spark sink."""

    single: type[SparkSink]
    base: SparkSink

    keeps_decoded = True

    def __init__(self, config: Any, settings: Any, drain: str = "") -> None:
        super().__init__(config, settings, drain)
        # per (run, attempt): the decoded records `flag` kept (with their route key), the
        # routes it found in them, and whether it kept them sorted by route key (`_kept`)
        self._kept: dict[tuple[int, int], tuple[DataFrame, Routes, bool]] = {}

    def prepare(self, spark: SparkSession, drain: str) -> None:
        self.base.prepare(spark, drain)

    def known_failure(self, err: BaseException, drain: str) -> Any:
        return self.base.known_failure(err, drain)

    def table(self, name: str) -> SparkSink:
        sink = super().table(name)
        assert isinstance(sink, SparkSink)
        return sink

    def committed(self, spark: SparkSession, ctx: RunContext) -> SinkCommit | None:
        """None: which tables a run routes to is known from its rows only, so a resumed run
        asks each table it routes to for the run's commit as it writes (`write`)."""
        return None

    def committed_anywhere(self, spark: SparkSession, ctx: RunContext) -> SinkCommit | None:
        """The tables of the drain that hold the run's commit (a crash between two tables'
        commits leaves some): `plan abandon` refuses the plan then, since the next plan would
        write those rows again. None when no table holds it."""
        with ctx.engine.connect() as conn:
            names = route_tables.registered(conn, ctx.drain.name)
        found = {n: self.table(n).committed(spark, ctx) for n in names}
        return self._combined(ctx, found) if any(found.values()) else None

    def flag(self, spark: SparkSession, ctx: RunContext, decoded: DataFrame) -> DataFrame:
        """The decoded rows with a route that names no table as bad records (the reason in
        `ERROR`), for a drain without a processor (whose output is these records: a
        processor's rows are routed, and checked, as it makes them).

        The records are kept (persisted) with their route key: the aggregate that finds the
        routes reads Kafka, and the bad records' staging and each table's write read the kept
        rows. Called once per attempt (the run decodes once for a sink that `keeps_decoded`)."""
        if ctx.drain.processor is not None or not set(self.router.columns) <= set(decoded.columns):
            return decoded
        run = (ctx.run.id, ctx.attempt)
        if run in self._kept:
            raise RuntimeError(f"run {run}: the routed sink flags an attempt's records once")
        dead_letters = ctx.drain.bad_records == "dead_letter"
        if not dead_letters:
            # a bad record fails the run as the rows are kept (by the routes' aggregate,
            # before any table is written), so the kept rows hold no reason, and no table's
            # write tests one again (0.3 s of CPU of a 1M-record run into 5 tables)
            decoded = guarded(decoded, ctx.drain.bad_records)
        keyed, known, by_key = self._keep(ctx, decoded)
        try:
            good = keyed.where(F.col(QUICK_ERROR).isNull()) if dead_letters else keyed
            routes = self._routes(ctx, good, known)
        except BaseException:
            keyed.unpersist()
            raise
        self._kept[run] = (keyed, routes, by_key)
        reason = routes.reason_of()
        if not dead_letters:  # the run's guard fails it on a row whose route has no table
            return keyed.withColumns({QUICK_ERROR: reason, BARRIER: F.lit(0)})
        return keyed.withColumns({c: F.coalesce(F.col(c), reason) for c in (ERROR, QUICK_ERROR)})

    def release(self, ctx: RunContext) -> None:
        kept = self._kept.pop((ctx.run.id, ctx.attempt), None)
        if kept is not None:
            kept[0].unpersist()

    def write(self, spark: SparkSession, ctx: RunContext, out: DataFrame) -> SinkCommit | None:
        kept = self._kept.get((ctx.run.id, ctx.attempt))
        own: DataFrame | None = None
        resorted: DataFrame | None = None
        if kept is not None and _KEY in out.columns:
            # the records `flag` kept, with their route key (a drain without a processor
            # writes them as decoded, bad records left out)
            keyed, routes, by_key = out, kept[1], kept[2]
        else:  # a processor's rows: keyed and kept here while they are routed and written
            keyed, known, by_key = self._keep(ctx, out)
            own = keyed
        try:
            if own is not None:
                routes = self._routes(ctx, own, known)
                if routes.assignment.rejected:
                    key, why = sorted(routes.assignment.rejected.items(), key=str)[0]
                    raise BadRecord(
                        f"run {ctx.run.id} of drain '{ctx.drain.name}': rows routed by {key} "
                        f"have no table ({why}); nothing was committed: fix the processor's "
                        "route column, or route by a decoded column so such records are bad "
                        "records"
                    )
            names = routes.assignment.names()
            self._register(ctx, names)
            if len(names) >= SORTED_FROM and not by_key:
                # the drain's first run of many tables (or its first past SORTED_FROM): its
                # rows were kept unsorted, so they are kept a second time, sorted, for this
                # run only; the next runs keep them sorted once (`_keep`)
                keyed = resorted = _sorted(keyed)
            commits = self._write_tables(spark, ctx, keyed, routes, names)
        finally:
            for kept_here in (own, resorted):
                if kept_here is not None:
                    kept_here.unpersist()
        if self.capabilities.commit != "before_postgres":
            log.info(
                "run %d of drain %s staged rows per table: %s",
                ctx.run.id,
                ctx.drain.name,
                ", ".join(f"{n} {routes.rows_of(n)}" for n in names) or "none",
            )
            return None  # staged: the commit transaction publishes every table's stage
        return self._combined(ctx, commits)

    def _combined(self, ctx: RunContext, commits: dict[str, SinkCommit | None]) -> SinkCommit:
        """The run's commits to its tables as one, each table's in `details["tables"]`."""
        made = [c for c in commits.values() if c is not None]
        return SinkCommit(
            self.type,
            self.location(),
            id=max((c.id for c in made), default=0),
            rows=sum(c.rows for c in made),
            bytes=sum(c.bytes for c in made),
            files=sum(c.files or 0 for c in made) if self.capabilities.files else None,
            attempt=ctx.attempt,
            details={"tables": table_commits(commits)},
        )

    def _write_tables(
        self,
        spark: SparkSession,
        ctx: RunContext,
        keyed: DataFrame,
        routes: Routes,
        names: list[str],
    ) -> dict[str, SinkCommit | None]:
        """Each table written: the first (in name order) alone until its commit is in, then
        the rest at once.

        A table's write leaves the cores idle while the driver reads its schema and, after the
        commit, its history; written at once, one table's tasks fill another's wait. The first
        goes alone so that a crash after its commit (`between_tables`) leaves exactly one table
        holding the run; the rest start as soon as its commit is in, while it reads its proof
        back (`write_signalled`). A Postgres table only stages (its commit transaction
        publishes them all), one after another: its stages are not worth the sessions."""
        if not names:
            return {}
        tasks = cores(spark)
        first, rest = names[0], names[1:]
        write = partial(self._write_table, spark, ctx, keyed, routes, tasks=tasks)
        if self.capabilities.commit != "before_postgres":
            commits = {first: write(first)}
            if rest:
                faults.crash_point(faults.BETWEEN_TABLES)
            return commits | {n: write(n) for n in rest}
        if not rest:
            return {first: write(first)}
        landed, first_in = threading.Event(), threading.Event()

        def first_landed() -> None:
            if not first_in.is_set():
                faults.crash_point(faults.BETWEEN_TABLES)
                first_in.set()
                landed.set()

        def first_table() -> SinkCommit | None:
            try:
                return write(first, landed=first_landed)
            finally:
                landed.set()  # failed too: the others stop waiting, and do not write

        def after_first(name: str) -> SinkCommit | None:
            landed.wait()
            if not first_in.is_set():
                # never reported: `at_once` raises the first table's failure, listed first
                raise RuntimeError(f"{name} not written: the first table's write failed")
            return write(name)

        calls = {first: first_table} | {n: partial(after_first, n) for n in rest}
        # one thread more than the tables written at once: the first's, reading its proof back
        return at_once(spark, calls, TABLES_AT_ONCE + 1)

    def _write_table(
        self,
        spark: SparkSession,
        ctx: RunContext,
        keyed: DataFrame,
        routes: Routes,
        name: str,
        tasks: int | None,
        landed: Callable[[], None] = no_signal,
    ) -> SinkCommit | None:
        """`name`'s rows written by its format's sink, in `tasks` tasks (the session's cores;
        None: one per kept partition, on a cluster that does not say its cores); `landed` is
        called once the table holds the run's commit (`write_signalled`)."""
        sink = self.table(name)
        found = sink.committed(spark, ctx) if ctx.attempt > 1 else None
        if found is not None:
            log.info(
                "run %d of drain %s: %s already holds its commit; not written again",
                ctx.run.id,
                ctx.drain.name,
                sink.describe(),
            )
            landed()
            return found
        # a filter on the kept key column itself: the cache's batch statistics skip the batches
        # without the table's keys (`_sorted`, in a run of many tables)
        part = keyed.where(F.col(_KEY).isin(routes.keys_of(name))).drop(_KEY)
        if self.config.value_schema_per_route:
            keep = routes.columns_of(name) | set(self.router.columns)
            part = part.select(*(f"`{c}`" for c in part.columns if c.startswith("_") or c in keep))
        if tasks:
            # one task per core, not one per partition of the read: a table gets a share of
            # the rows, and each task's start, file and statistics cost as much for a share as
            # for the whole (1M records into 5 Delta tables: 8.97 -> 7.50 s on 2 cores, 60 ->
            # 10 files). The kept rows are in memory: a task reading more of them costs little
            part = part.coalesce(tasks)
        return sink.write_signalled(spark, ctx, part, landed)

    def _keep(self, ctx: RunContext, rows: DataFrame) -> tuple[DataFrame, list[str], bool]:
        """`rows` with their route key, kept (`_kept`): sorted by it when the tables the
        drain's runs routed to so far (on record: `_register`) number `SORTED_FROM` or more.
        Returns the kept rows, those tables, and whether the rows were sorted."""
        with ctx.engine.connect() as conn:
            known = route_tables.registered(conn, ctx.drain.name)
        by_key = len(known) >= SORTED_FROM
        return _kept(rows.withColumn(_KEY, _key(self.router.columns)), by_key), known, by_key

    def _routes(self, ctx: RunContext, keyed: DataFrame, known: list[str]) -> Routes:
        """The run's route keys, each key's rows and non-null columns: one aggregate; `known`:
        the drain's tables so far (`_keep`).

        A key's values are read back from its text (`key_values`), not taken with `first`: every
        buffer is then a count, which Spark keeps in a hash table, where a `first` of an array
        had it sort the run's rows by key (0.7 s of a 1M-record run of 9 s, on 2 cores)."""
        values = [c for c in keyed.columns if c != _KEY and c != ERROR and not c.startswith("_")]
        aggs = [F.count(F.lit(1)).alias("_rows")]
        aggs += [F.count(F.col(f"`{c}`")).alias(f"_f{i}") for i, c in enumerate(values)]
        found = keyed.groupBy(_KEY).agg(*aggs).collect()
        keys = {r[_KEY]: key_values(r[_KEY]) for r in found}
        return Routes(
            self.router.assign(keys.values(), known),
            keys,
            {r[_KEY]: int(r["_rows"]) for r in found},
            {r[_KEY]: frozenset(c for i, c in enumerate(values) if r[f"_f{i}"]) for r in found},
        )

    def _register(self, ctx: RunContext, names: list[str]) -> None:
        """The run's tables on record before any is written (fenced): the commit, a resumed
        run and `drainer maintain` find them there."""
        with ctx.engine.begin() as conn:
            check_fence(conn, ctx.lease, shared=True)
            route_tables.register(conn, ctx.drain.name, names, ctx.run.id)

    def maintain_table(
        self, spark: SparkSession, retention_hours: float, force: bool
    ) -> dict[str, Any]:
        from drainer.store.engine import get_engine

        with get_engine(self.settings.database_url).connect() as conn:
            names = route_tables.registered(conn, self.drain)
        done = {n: self.table(n).maintain_table(spark, retention_hours, force) for n in names}
        return {
            "format": self.type,
            "location": self.location(),
            "tables": done,
            "files_removed": sum(int(d.get("files_removed", 0)) for d in done.values()),
            "files_added": sum(int(d.get("files_added", 0)) for d in done.values()),
            "retention_hours": retention_hours,
        }


def _kept(keyed: DataFrame, by_key: bool) -> DataFrame:
    """The keyed rows persisted: the routes' aggregate fills the cache, and the bad records'
    staging and each table's write read it. `by_key`: sorted by route key within each
    partition first (`_sorted` says why), for a drain whose runs route to `SORTED_FROM` tables
    or more: what its last runs routed to is the best guess of this run's tables before its
    rows are read."""
    return _sorted(keyed) if by_key else keyed.persist(StorageLevel.MEMORY_AND_DISK)


def _sorted(keyed: DataFrame) -> DataFrame:
    """The keyed rows persisted sorted by route key within each partition (a run of
    `SORTED_FROM` tables or more): a cached batch then holds few keys, and each table's write
    reads the batches of its own keys only (the min/max statistics Spark keeps per cached
    batch), not the whole run's rows once per table. Sorted again from the first cache (a
    drain's first run of many tables), the first table's write, which runs alone, sorts them."""
    return keyed.sortWithinPartitions(_KEY).persist(StorageLevel.MEMORY_AND_DISK)


def _key(columns: tuple[str, ...]) -> Column:
    """A row's route values as one text column, the key rows are grouped and looked up by:
    each value as text, its length and `:` before it, `-` for a null (`key_values` reads it
    back). Spark's own JSON of them (`to_json`) cost 0.3 s of CPU per 1M records, where
    these functions run in the stage's generated code."""
    pieces = []
    for column in columns:
        text = F.col(f"`{column}`").cast("string")
        pieces.append(
            F.coalesce(F.concat(F.length(text).cast("string"), F.lit(":"), text), F.lit("-"))
        )
    return F.concat(*pieces)


def key_values(text: str) -> RouteKey:
    """The route values a key text (`_key`) holds, None for a null."""
    values: list[str | None] = []
    at = 0
    while at < len(text):
        if text[at] == "-":
            values.append(None)
            at += 1
            continue
        colon = text.index(":", at)
        end = colon + 1 + int(text[at:colon])
        values.append(text[colon + 1 : end])
        at = end
    return tuple(values)


def routed_spark_class(single: type[SparkSink]) -> type[RoutedSparkSink]:
    """The routed Spark sink of a format."""
    return _classes.setdefault(
        single,
        type(
            f"Routed{single.__name__}",
            (RoutedSparkSink,),
            {"type": single.type, "capabilities": single.capabilities, "single": single},
        ),
    )


_classes: dict[type[SparkSink], type[RoutedSparkSink]] = {}

__all__ = ["RoutedSparkSink", "routed_spark_class"]
