"""The per-run stage table's name fits Postgres's 63 bytes for every allowed sink table name."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drainer.store import sink_names, sinks

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,62}", fullmatch=True)
RUN_IDS = st.integers(min_value=1, max_value=2**63 - 1)


def test_a_short_table_keeps_its_name():
    assert sink_names.stage_name("events", 42) == "events_r42"
    assert sinks.legacy_staging_name("events") == "events_staging"


@given(NAMES, RUN_IDS)
def test_stage_and_index_names_fit_and_end_with_the_run(table, run_id):
    stage = sink_names.stage_name(table, run_id)
    index = sinks._task_index_name(table, run_id)
    assert len(stage.encode()) <= sink_names.MAX_IDENTIFIER_BYTES
    assert len(index.encode()) <= sink_names.MAX_IDENTIFIER_BYTES
    assert stage.endswith(f"_r{run_id}") and index != stage
    assert sink_names.stage_name(table, run_id) == stage  # the driver and the tasks agree


def test_long_names_sharing_a_prefix_get_different_stages():
    a, b = "t" * 62 + "a", "t" * 62 + "b"
    assert sink_names.stage_name(a, 7) != sink_names.stage_name(b, 7)
    assert sink_names.stage_name(a, 7) != sink_names.stage_name(a, 8)
    assert sinks.legacy_staging_name(a) is None  # earlier versions refused such names


def test_a_name_postgres_would_truncate_is_refused():
    assert sink_names.check_table_name("t" * 63) == "t" * 63
    try:
        sink_names.check_table_name("t" * 64)
    except ValueError as err:
        assert "use at most 63 bytes" in str(err)
    else:
        raise AssertionError("a 64-byte name was accepted")
