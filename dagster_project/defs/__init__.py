"""This code location's `dg` defs folder: one `drainer.dagster.DrainsComponent` (drains/defs.yaml)."""
