"""`metadata_columns`: which of the reserved metadata columns a drain's decoded rows carry
(docs/configuration.md, "Record formats"), checked at load against what the drain needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from drainer.config.formats import COORDINATES, METADATA_COLUMNS
from drainer.config.routing import router
from drainer.config.sink_models import DEFAULT_KEY, DEFAULT_ORDER, top_column

if TYPE_CHECKING:
    from drainer.config.drains import DrainConfig


def check_metadata(drain: DrainConfig) -> None:
    """`metadata_columns` names metadata columns, keeps the coordinates, applies to decoded
    rows, and keeps what the sink reads (an upsert's key, order and level; a route): else a
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
    missing = [c for c in COORDINATES if c not in chosen]
    if missing:
        raise ValueError(
            f"metadata_columns leaves out {missing[0]}: every row keeps its record's "
            f"coordinates ({', '.join(COORDINATES)}), which name it in errors and dead "
            "letters: add it"
        )
    if drain.mode == "record" or (drain.processor is not None and drain.value is None):
        raise ValueError(
            "metadata_columns shapes the decoded rows, which this drain has none of (record "
            "mode, or a processor given the raw read): drop it, or declare `value`"
        )
    for column, needs in sink_needs(drain.sink).items():
        if column not in chosen:
            raise ValueError(f"metadata_columns leaves out {column}, which {needs} reads: add it")


def sink_needs(sink: Any) -> dict[str, str]:
    """The metadata columns a sink's configuration reads, each with the setting that reads
    it: an upsert's key and order (their defaults included) and `_level`, its tie-breaker
    between levels; a route's columns."""
    needs: dict[str, str] = {}
    if getattr(sink, "write", "append") == "upsert":
        needs["_level"] = "`write: upsert` (ties between levels)"
        keys = () if sink.type == "kafka" else (sink.primary_key or DEFAULT_KEY)
        for setting, paths in (("primary_key", keys), ("order_by", sink.order_by or DEFAULT_ORDER)):
            for path in paths:
                needs.setdefault(top_column(path), f"sink.{setting}")
    routing = router(sink)
    for column in routing.columns if routing is not None else ():
        needs.setdefault(column, "the sink's route")
    return {c: why for c, why in needs.items() if c in METADATA_COLUMNS}
