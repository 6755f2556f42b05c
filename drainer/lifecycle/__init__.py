"""One run's path: lease, plan (or resume), execute, commit, mirror; and the audited ways out of
a stuck state (abandon a plan, rewind a level).

`run.drain_once` is the one entry the CLI, Dagster and the tests call. Every step keeps the
exactly-once promise: a plan is stored before anything is read, and a crash anywhere leaves a
plan that the next run re-executes with the same ranges.
"""
