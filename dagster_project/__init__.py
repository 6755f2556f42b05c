"""Dagster definitions for drainer: assets, schedules, sensors and checks, and nothing else."""
