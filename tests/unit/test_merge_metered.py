"""A Delta merge's counts completed from its commit's metrics (`MergeMetered`) equal the counts
of the join against the table (spark_jobs.sinks.upsert.count_changes's rules) for every run
without deletes: Delta's metrics modelled here as Delta defines them for drainer's MERGE."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drainer.sinks.upsert import MergeMetered, UpsertCounts, counts_of_merge

KEYS = st.integers(0, 30)
# the table: key -> (its order value, whether the row is a delete marker)
TABLES = st.dictionaries(KEYS, st.tuples(st.integers(0, 5), st.booleans()), max_size=25)
# the run's collapsed rows, none of them a delete: key -> order value
RUNS = st.dictionaries(KEYS, st.integers(0, 5), max_size=25)


def delta_metrics(table: dict, run: dict) -> dict[str, str]:
    """`MERGE ... WHEN MATCHED AND <newer> THEN UPDATE ... WHEN NOT MATCHED THEN INSERT`:
    Delta counts source rows, inserts, and matched rows its update clause changed (strings,
    as a commit's operationMetrics hold them)."""
    matched_updated = sum(1 for k, v in run.items() if k in table and v > table[k][0])
    inserted = sum(1 for k in run if k not in table)
    return {
        "numSourceRows": str(len(run)),
        "numTargetRowsInserted": str(inserted),
        "numTargetRowsMatchedUpdated": str(matched_updated),
    }


def joined_counts(table: dict, run: dict) -> UpsertCounts:
    """count_changes's rules: a new key or a revived marker is an insert, a newer version of
    a live row an update, an older version skipped."""
    inserted = updated = skipped = 0
    for k, v in run.items():
        if k not in table:
            inserted += 1
        elif v <= table[k][0]:
            skipped += 1
        elif table[k][1]:
            inserted += 1
        else:
            updated += 1
    return UpsertCounts(inserted=inserted, updated=updated, skipped=skipped)


@given(TABLES, RUNS)
def test_the_commit_metrics_and_the_revived_markers_give_the_joins_counts(table, run):
    revived = sum(1 for k, v in run.items() if k in table and table[k][1] and v > table[k][0])
    metered = MergeMetered(revived)
    assert metered.counts(delta_metrics(table, run)) == joined_counts(table, run)
    # as a resumed run reads them: the marker's details, then the commit's metrics
    marked = metered.details()
    assert counts_of_merge(marked, delta_metrics(table, run)) == joined_counts(table, run).as_dict()


def test_counts_counted_before_the_merge_are_read_as_they_are():
    counts = UpsertCounts(inserted=3, updated=2, deleted=1, skipped=4).as_dict()
    assert counts_of_merge(counts, {"numTargetRowsInserted": "99"}) == counts
