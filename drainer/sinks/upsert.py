"""State tables (`sink.write: upsert`): which columns are the key and the order, what a delete
is, and the conditions every format's merge uses. Pure: strings and plain values only.

The rules, the same in Postgres, Delta and Iceberg:

- within a run the rows of a key collapse to the newest by `order_by`, then a delete before
  an upsert of the same order, then level, partition and offset (deterministic);
- across runs a row is replaced only by a newer version (`newer`); a version whose `order_by`
  values are all null (a tombstone with nothing to order it by) counts as the newest, and a
  delete that replaces a row keeps the row's order, so what it deleted stays deleted;
- a delete is not a removed row but a marker: the row with `_deleted_at` set to when the run
  merged it. An older version drained later (from a lower level, in a later run) meets the
  marker and loses; `drainer maintain` removes markers older than `delete_retention`.
  Markers rather than a side table: one table means one commit, so the merge keeps the
  proof of an append (Delta's txn id, Iceberg's published WAP id, Postgres's transaction).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drainer.config.sink_models import DEFAULT_KEY, DEFAULT_ORDER, TIE_BREAKERS, top_column
from drainer.config.units import duration_ms
from drainer.errors import ConfigError
from drainer.store.upserts import DELETED_AT, UpsertCounts, kept_order, newer, ref

TOMBSTONE = "_drainer_tombstone"  # the record's value was null: the row deletes its key
DELETE = "_drainer_delete"  # the collapsed row is a delete (tombstone or `delete_when`)
KAFKA_KEY = ("key",)  # the Kafka sink's output column its records are keyed by
KEY_PROPERTY = "drainer.primary_key"  # Delta / Iceberg table property naming the key


@dataclass(frozen=True)
class UpsertSpec:
    """An upsert sink's settings, resolved: key and order columns, delete rule, retention;
    `unwritten`, the metadata columns the run's rows carry to break ties but the table does
    not keep (`DrainConfig.unwritten_metadata`), dropped once the rows are collapsed."""

    keys: tuple[str, ...]
    order: tuple[str, ...]
    delete_when: str | None
    retention_ms: int
    unwritten: tuple[str, ...] = ()

    def tie_breakers(self, columns: Iterable[str]) -> tuple[str, ...]:
        """The tie-breaking columns the output has and `order` does not name already."""
        have = set(columns)
        return tuple(c for c in TIE_BREAKERS if c in have and c not in self.order)

    def key_property(self) -> str:
        """The key as recorded in a table's properties (`drainer.primary_key`)."""
        return ",".join(self.keys)


def upsert_spec(config: Any, unwritten: Sequence[str] = ()) -> UpsertSpec | None:
    """The upsert settings of a sink's configuration, or None for an append sink;
    `unwritten`: the run's metadata columns its table does not keep."""
    if getattr(config, "write", "append") != "upsert":
        return None
    if getattr(config, "type", None) == "kafka":
        # a compacted topic keeps the last record per Kafka key: the key is the output's `key`,
        # and the topic's own `delete.retention.ms` keeps its tombstones
        return UpsertSpec(
            keys=KAFKA_KEY,
            order=tuple(config.order_by or DEFAULT_ORDER),
            delete_when=config.delete_when,
            retention_ms=0,
            unwritten=tuple(unwritten),
        )
    return UpsertSpec(
        keys=tuple(config.primary_key or DEFAULT_KEY),
        order=tuple(config.order_by or DEFAULT_ORDER),
        delete_when=config.delete_when,
        retention_ms=duration_ms(config.delete_retention),
        unwritten=tuple(unwritten),
    )


def check_columns(spec: UpsertSpec, columns: Sequence[str], where: str) -> None:
    """Every key and order column is in the output: else a one-line ConfigError naming it."""
    have = set(columns)
    for setting, paths in (("primary_key", spec.keys), ("order_by", spec.order)):
        missing = [p for p in paths if top_column(p) not in have]
        if missing:
            raise ConfigError(
                f"sink.{setting} names {missing[0]}, which the output to {where} does not "
                f"have (its columns: {', '.join(columns)}): name an output column, or make "
                "the processor keep it. Nothing was committed"
            )
    if DELETED_AT in have:
        raise ConfigError(
            f"the output to {where} has a column {DELETED_AT}, which an upsert table keeps "
            "for its delete markers: rename it in the processor"
        )


MERGE_METRICS = "revived_then_merge_metrics"  # the marker's key: counts from the commit


@dataclass(frozen=True)
class MergeMetered:
    """A Delta merge's counts, to be read from the merge's own commit: a run without deletes
    whose rows `revived` keys the table held as delete markers (newer versions of them).

    Delta's MERGE records in its commit the rows it inserted (source rows matching no table
    row), the rows its WHEN MATCHED clause updated (a newer version: drainer's updates, plus
    the revived markers, which drainer counts as inserts) and its source rows. With no delete
    in the run, those and `revived` give every count, exactly, without the join against the
    whole table that a run with deletes needs (a delete of a live row and of a marker look
    alike to Delta's metrics)."""

    revived: int

    def details(self) -> dict[str, int]:
        """What the commit's marker holds of it (`counts_of_merge` reads it back)."""
        return {MERGE_METRICS: self.revived}

    def counts(self, metrics: Mapping[str, Any]) -> UpsertCounts:
        """The counts, from the operation metrics of the merge's commit."""
        inserted = int(metrics["numTargetRowsInserted"])
        matched = int(metrics["numTargetRowsMatchedUpdated"])
        rows = int(metrics["numSourceRows"])
        return UpsertCounts(
            inserted=inserted + self.revived,
            updated=matched - self.revived,
            deleted=0,
            skipped=rows - inserted - matched,
        )


def counts_of_merge(marked: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, int]:
    """The counts a Delta merge commit's marker holds (`upsert`): as counted before the merge,
    or to be completed from the commit's operation metrics (`MergeMetered`)."""
    if MERGE_METRICS in marked:
        return MergeMetered(int(marked[MERGE_METRICS])).counts(metrics).as_dict()
    return dict(marked)


def check_key_unchanged(where: str, recorded: Sequence[str] | None, spec: UpsertSpec) -> None:
    """A table made with another key: a one-line ConfigError (its rows are keyed by that)."""
    if recorded is not None and tuple(recorded) == spec.keys:
        return
    if recorded is None:
        raise ConfigError(
            f"sink.write is upsert, but the table {where} was made by `write: append` (it "
            "records no primary key, and may hold a key more than once): write the upserts to "
            "a new table"
        )
    raise ConfigError(
        f"sink.primary_key is [{', '.join(spec.keys)}], but the table {where} was made with "
        f"primary key [{', '.join(recorded)}]: its rows are unique by that key only. Put back "
        "primary_key, or write to a new table. Nothing was committed"
    )


__all__ = [
    "DEFAULT_KEY",
    "DEFAULT_ORDER",
    "DELETED_AT",
    "DELETE",
    "KAFKA_KEY",
    "KEY_PROPERTY",
    "TIE_BREAKERS",
    "TOMBSTONE",
    "UpsertCounts",
    "MergeMetered",
    "counts_of_merge",
    "UpsertSpec",
    "check_columns",
    "check_key_unchanged",
    "kept_order",
    "newer",
    "ref",
    "upsert_spec",
]
