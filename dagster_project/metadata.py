"""Materialization metadata: each level partition carries its own level's numbers.

Every level partition's materialization has the same keys (`drained`, `reserved`, …), so the
asset's plots by partition compare levels and the plots by event follow each level over time.
Run-wide totals carry a `run_` prefix and are the same on every partition of a run.
"""

from __future__ import annotations

import dagster as dg

from drainer.lifecycle.run import LevelReport, RunResult

PHASES = ("plan", "spark_start", "spark_job", "commit", "mirror")


def level_metadata(lv: LevelReport) -> dict[str, dg.MetadataValue]:
    numbers = {
        "reserved": lv.reserved,
        "burst": lv.burst,
        "allocated": lv.allocated,
        "planned": lv.planned,
        "drained": lv.drained,
        "backlog_before": lv.backlog_before,
        "backlog_after": lv.backlog_after,
        # offsets Kafka's retention deleted before they were drained (recorded per run)
        "lost_to_retention": lv.lost_to_retention,
        "dead_letters": lv.dead_lettered,
        "failed": lv.failed,
        # throttled on purpose: the level used what it was given while records still wait
        "throttled": int(lv.backlog_after > 0 and lv.drained >= lv.allocated),
    }
    metadata: dict[str, dg.MetadataValue] = {
        key: dg.MetadataValue.int(int(value)) for key, value in numbers.items()
    }
    metadata["fill_ratio"] = dg.MetadataValue.float(round(float(lv.fill_ratio or 0.0), 4))
    return metadata


def run_metadata(result: RunResult) -> dict[str, dg.MetadataValue]:
    """Totals of the drainer run the materialization belongs to."""
    duration = result.duration_s or 0.0
    metadata: dict[str, dg.MetadataValue] = {
        "drain_run_id": dg.MetadataValue.int(result.run_id),
        "run_levels": dg.MetadataValue.text(",".join(str(lv.level) for lv in result.levels)),
        "run_drained": dg.MetadataValue.int(result.drained),
        "run_records_per_s": dg.MetadataValue.float(
            round(result.drained / duration, 1) if duration else 0.0
        ),
        "run_duration_s": dg.MetadataValue.float(round(duration, 3)),
        "run_shared": dg.MetadataValue.bool(result.shared),
        "run_resumed": dg.MetadataValue.bool(result.resumed),
        "run_mirror_maps_dropped": dg.MetadataValue.int(result.mirror.maps_dropped),
    }
    for phase in PHASES:
        metadata[f"run_{phase}_s"] = dg.MetadataValue.float(
            round(float(result.phases.get(phase, 0.0)), 3)
        )
    if result.finished is not None:
        metadata["finished_run_id"] = dg.MetadataValue.int(result.finished.run_id)
        metadata["finished_run_drained"] = dg.MetadataValue.int(result.finished.drained)
        if result.finished.retried or result.finished.dead_again:  # dead letters `dlq retry` gave
            metadata["dead_letters_retried"] = dg.MetadataValue.int(result.finished.retried)
            metadata["dead_letters_failed_again"] = dg.MetadataValue.int(result.finished.dead_again)
    # the sink table's new columns (new optional fields of the records), audited per run
    metadata["run_columns_added"] = dg.MetadataValue.int(len(result.columns_added))
    if result.columns_added:
        metadata["run_columns_added_names"] = dg.MetadataValue.text(", ".join(result.columns_added))
    commit = result.table_commit
    if commit and "files_added" in commit:  # a table format: the commit this run made (or
        # found, when resumed)
        metadata["table_format"] = dg.MetadataValue.text(commit["format"])
        metadata["table_location"] = dg.MetadataValue.path(commit["location"])
        metadata["table_version"] = dg.MetadataValue.int(commit["version"])
        metadata["table_files_added"] = dg.MetadataValue.int(commit["files_added"])
        metadata["table_bytes_added"] = dg.MetadataValue.int(commit["bytes_added"])
    if commit:
        details = commit.get("details") or {}
        # a Kafka sink: records produced per output topic, its transactional id, and the
        # attempts before the one that committed (each one's transaction aborted or fenced)
        for topic, count in (details.get("produced") or {}).items():
            metadata[f"kafka_produced_{topic}"] = dg.MetadataValue.int(int(count))
        if "transactional_id" in details:
            metadata["kafka_marker_offset"] = dg.MetadataValue.int(commit["version"])
            metadata["kafka_bytes_produced"] = dg.MetadataValue.int(commit["bytes_added"])
            metadata["kafka_transactional_id"] = dg.MetadataValue.text(details["transactional_id"])
            metadata["kafka_aborted_attempts"] = dg.MetadataValue.int(details["aborted_attempts"])
        if "producer" in details:  # where its transactional producer ran: server or driver
            metadata["kafka_producer"] = dg.MetadataValue.text(details["producer"])
    # a routed sink: the rows the run wrote into each table, in any table sink
    for name, rows in result.table_rows.items():
        metadata[f"table_rows_{name}"] = dg.MetadataValue.int(rows)
    # a state table (`write: upsert`): what the run's merge did, in any table sink
    for name, count in (result.upsert or {}).items():
        metadata[f"table_{name}"] = dg.MetadataValue.int(int(count))
    # steps after the commit that failed (mirror, dead-letter publish, backlog lookup): the run
    # succeeded, and the next run retries them
    metadata["run_warnings"] = dg.MetadataValue.int(len(result.warnings))
    if result.warnings:
        metadata["run_warning_text"] = dg.MetadataValue.md(
            "\n".join(f"- {w}" for w in result.warnings)
        )
    return metadata


def run_tags(result: RunResult) -> dict[str, str]:
    """Tags for the Dagster run: `drainer status` and the UI name the same run."""
    duration = result.duration_s or 0.0
    tags = {
        "drainer/run_id": str(result.run_id),
        "drainer/drained": str(result.drained),
        "drainer/records_per_s": f"{result.drained / duration:.0f}" if duration else "0",
        "drainer/phases": " ".join(f"{p}={result.phases.get(p, 0.0):.2f}s" for p in PHASES),
    }
    if result.finished is not None:
        tags["drainer/finished_run_id"] = str(result.finished.run_id)
    return tags
