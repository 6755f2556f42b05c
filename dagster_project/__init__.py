"""Dagster definitions for drainer: assets, schedules, sensors and checks, and nothing else.

A team's code location takes the drains of a drains file with
`dg.Definitions.merge(drain_definitions("drains.yaml"), their_definitions)` (docs/dagster.md).
"""

from dagster_project.factory import drain_definitions
from dagster_project.resources import DrainerResource

__all__ = ["DrainerResource", "drain_definitions"]
