"""The code location `dagster dev -w workspace.yaml` loads: the drains file's definitions.

Only assembly: what each drain becomes is dagster_project.factory (`drain_definitions`, which a
team's own code location calls the same way). Connections come from the environment through
the `drainer` resource (dagster_project.resources).
"""

from __future__ import annotations

import dagster as dg

from dagster_project.automation import RANGE_END, RANGE_START, all_levels_tags
from dagster_project.factory import drain_definitions

__all__ = ["RANGE_END", "RANGE_START", "all_levels_tags", "build_definitions", "defs"]


def build_definitions() -> dg.Definitions:
    """This code location: the drains of DRAINER_CONFIG (or ./drains.yaml), run in-process."""
    return dg.Definitions.merge(
        drain_definitions(),
        # the UI's Materialize runs the implicit asset job: in-process like the drains' own jobs
        dg.Definitions(executor=dg.in_process_executor),
    )


defs = build_definitions()
