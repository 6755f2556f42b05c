"""One run's path: lease, plan (or resume), execute, commit, mirror; and the audited ways out of
a stuck state (abandon a plan, rewind a level).

`run.drain_once` is the one entry the CLI, Dagster and the tests call. Every step keeps the
exactly-once promise: a plan is stored before anything is read, and a crash anywhere leaves a
plan that the next run re-executes with the same ranges.

| module      | owns                                                                         |
|-------------|------------------------------------------------------------------------------|
| `run`       | `drain_once`: lease, gather what is open, act on the decision, plan           |
| `decision`  | pure: report a launch's run / resume / finish another plan first / plan anew |
| `planning`  | the live state a plan is made from (watermarks, stored progress, history)    |
| `execute`   | a stored plan carried out: attempt, execute, commit, mirror, report          |
| `commit`    | the one commit transaction                                                   |
| `results`   | what an executor gets (`RunContext`) and what a run reports (`RunResult`)    |
| `retention` | what Kafka retention deleted of a plan's ranges, measured before each read   |
| `dlq`, `abandon`, `rewind` | dead-letter publishing; the audited ways out of a stuck state  |
"""
