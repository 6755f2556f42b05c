"""How a run counts what it read: above its processor when each record is one row of the
output, else beneath it, on the read.

The commit needs each partition's records (offsets are not records: transaction markers,
aborted or compacted records), and a drain that plans with bytes needs their bytes. Counted on
the read, an observation costs a copy of every record (`spark_jobs.row_preserving`); counted on
the output, where Spark has made the rows already, it costs nothing, but it can stand for the
read only when:

- the run is a dataframe run of Kafka ranges (record mode counts per partition, as it reads);
- no bytes are wanted (`bytes_by`): the output no longer holds the records' keys and values;
- the drain's last run found no gaps, so the records each partition can return are known
  (`RunContext.readable_records`) and a total checks them all;
- decoding keeps every record (`bad_records: fail`: a bad record fails the run, where a dead
  letter would leave the output short of it) and the processor keeps one row per record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame

from drainer.config import DrainConfig
from drainer.lifecycle.results import RunContext
from drainer.store import throughput
from drainer.store.runs import StoredRange
from spark_jobs.kafka_source import BytesBy, Measure, counted, counted_rows
from spark_jobs.row_preserving import preserves_rows


def bytes_by(drain: DrainConfig) -> BytesBy:
    """The bytes a run of `drain` counts: per partition for a byte budget (it plans with each
    partition's record size), per level for a time box (byte rates) or `measure_bytes: true`,
    else none."""
    if drain.budget_bytes is not None:
        return "partition"
    if drain.measure_bytes or (drain.measure_bytes is None and drain.run_seconds is not None):
        return "level"
    return None


@dataclass(frozen=True)
class RunCounts:
    """What counting a run's read takes, decided once at its start."""

    ranges: list[StoredRange]
    bytes_by: BytesBy
    full: Mapping[tuple[str, int], int] | None  # None: each partition counted on its own
    recount: bool  # a read Spark pruned away is read again to count it (dataframe mode)
    may_count_output: bool

    @property
    def may_count_above(self) -> bool:
        """Whether the output may stand for the read at all (`above` still reads the
        processor's plan): else the read is counted before any output is built on it."""
        return self.may_count_output and self.full is not None

    def beneath(self, read: DataFrame) -> tuple[DataFrame, Measure]:
        """The read, counted by the job that consumes it (`counted`)."""
        return counted(read, self.ranges, self.recount, self.bytes_by, self.full)

    def above(
        self, out: DataFrame, processed: DataFrame, read: DataFrame
    ) -> tuple[DataFrame, Measure] | None:
        """`out` with its rows counted as the read's records, when `out` is one row per row
        of `processed` (the processor's input) and that holds every record of `read`; else
        None (count `beneath`, and build the output again on the counted read)."""
        if self.full is None or not self.may_count_above or not preserves_rows(out, processed):
            return None
        return counted_rows(out, read, self.ranges, self.full)


def run_counts(ctx: RunContext, decodes: bool) -> RunCounts:
    """How `ctx`'s run counts its read; `decodes`: its records become typed rows first."""
    drain = ctx.drain
    dataframe = drain.mode == "dataframe"
    wanted = bytes_by(drain)
    return RunCounts(
        ranges=ctx.run.ranges,
        bytes_by=wanted,
        full=_full_reads(ctx),
        # record mode never prunes the read, so its observation is there; were it missing, the
        # bytes stay unmeasured rather than read twice
        recount=dataframe,
        may_count_output=(
            dataframe
            and wanted is None
            and bool(ctx.run.ranges)
            and not ctx.run.retries
            and (not decodes or drain.bad_records == "fail")
        ),
    )


def _full_reads(ctx: RunContext) -> dict[tuple[str, int], int] | None:
    """What each partition's read returns when its offsets have no gaps, for a dataframe-mode
    run whose drain's last run found none (its counts then come from the total); None counts
    each partition. Record mode keeps its per-partition counts: it never reads twice."""
    if ctx.drain.mode != "dataframe":
        return None
    with ctx.engine.connect() as conn:
        if throughput.last_read_had_gaps(conn, ctx.drain.name):
            return None
    return ctx.readable_records()
