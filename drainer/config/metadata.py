"""`metadata_columns`: which of the reserved metadata columns a drain's sink writes
(docs/configuration.md, "Record formats"), checked at load against what the sink reads; the
columns the run itself reads (`run_metadata`) are carried whether written or not."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from drainer.config.formats import COORDINATES, METADATA_COLUMNS
from drainer.config.routing import router
from drainer.config.sink_models import DEFAULT_KEY, DEFAULT_ORDER, TIE_BREAKERS, top_column

if TYPE_CHECKING:
    from drainer.config.drains import DrainConfig


def check_metadata(drain: DrainConfig) -> None:
    """`metadata_columns` names metadata columns, applies to decoded rows, and keeps what the
    table holds for the sink (an upsert's key and order; a route's columns): else a
    ValueError the drains file's loader reports in one line."""
    chosen = drain.metadata_columns
    if chosen is None:
        return
    unknown = [c for c in chosen if c not in METADATA_COLUMNS]
    if unknown:
        raise ValueError(
            f"metadata_columns names {unknown[0]!r}, which is no metadata column: name "
            f"some of {', '.join(METADATA_COLUMNS)}"
        )
    if drain.mode == "record" or (drain.processor is not None and drain.value is None):
        raise ValueError(
            "metadata_columns shapes the decoded rows, which this drain has none of (record "
            "mode, or a processor given the raw read): drop it, or declare `value`"
        )
    for column, needs in sink_needs(drain.sink).items():
        if column not in chosen:
            raise ValueError(f"metadata_columns leaves out {column}, which {needs} reads: add it")


def run_metadata(sink: Any) -> tuple[str, ...]:
    """The metadata columns a run reads whether its sink writes them or not: the record's
    coordinates (errors, dead letters, the order of a tombstone) and, for an upsert, the
    tie-breakers between versions of equal order (`_level`, then partition and offset)."""
    upsert = getattr(sink, "write", "append") == "upsert"
    return (*COORDINATES, *TIE_BREAKERS) if upsert else COORDINATES


def sink_needs(sink: Any) -> dict[str, str]:
    """The metadata columns a sink's table must hold, each with the setting that reads it:
    an upsert's key and order (their defaults included), compared with the table's rows by
    later runs; a route's columns."""
    needs: dict[str, str] = {}
    if getattr(sink, "write", "append") == "upsert":
        keys = () if sink.type == "kafka" else (sink.primary_key or DEFAULT_KEY)
        for setting, paths in (("primary_key", keys), ("order_by", sink.order_by or DEFAULT_ORDER)):
            for path in paths:
                needs.setdefault(top_column(path), f"sink.{setting}")
    routing = router(sink)
    for column in routing.columns if routing is not None else ():
        needs.setdefault(column, "the sink's route")
    return {c: why for c, why in needs.items() if c in METADATA_COLUMNS}
