"""The code location `dagster dev -w workspace.yaml` loads: its `dg` defs folder.

Only assembly: dagster_project/defs/drains/defs.yaml is one `drainer.dagster.DrainsComponent`,
which builds the drains file's definitions with dagster_project.factory (`drain_definitions`,
which a team's own code location calls the same way). Connections come from the environment
through the `drainer` resource (dagster_project.resources).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import dagster as dg
from dagster.components import load_defs

from dagster_project.automation import RANGE_END, RANGE_START, all_levels_tags

__all__ = ["RANGE_END", "RANGE_START", "all_levels_tags", "build_definitions", "defs"]


def build_definitions() -> dg.Definitions:
    """This code location: the drains of DRAINER_CONFIG (or ./drains.yaml), run in-process."""
    return dg.Definitions.merge(
        # the defs module itself, no project file to find: a checkout and an installed wheel
        # load alike (the `dg` CLI's project settings are pyproject.toml's [tool.dg])
        load_defs(
            importlib.import_module("dagster_project.defs"), project_root=Path(__file__).parent
        ),
        # the UI's Materialize runs the implicit asset job: in-process like the drains' own jobs
        dg.Definitions(executor=dg.in_process_executor),
    )


defs = build_definitions()
