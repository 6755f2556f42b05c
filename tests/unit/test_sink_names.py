"""The per-run stage table's name fits Postgres's 63 bytes for every allowed sink table name."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from drainer.store import sink_names, sink_tables

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,62}", fullmatch=True)
RUN_IDS = st.integers(min_value=1, max_value=2**63 - 1)


def test_a_short_table_keeps_its_name():
    assert sink_names.stage_name("events", 42) == "events_r42"
    assert sink_tables.legacy_staging_name("events") == "events_staging"


@given(NAMES, RUN_IDS)
def test_stage_names_fit_and_end_with_the_run(table, run_id):
    stage = sink_names.stage_name(table, run_id)
    assert len(stage.encode()) <= sink_names.MAX_IDENTIFIER_BYTES
    assert stage.endswith(f"_r{run_id}")
    assert sink_names.stage_name(table, run_id) == stage  # the driver and the tasks agree


def test_long_names_sharing_a_prefix_get_different_stages():
    a, b = "t" * 62 + "a", "t" * 62 + "b"
    assert sink_names.stage_name(a, 7) != sink_names.stage_name(b, 7)
    assert sink_names.stage_name(a, 7) != sink_names.stage_name(a, 8)
    assert sink_tables.legacy_staging_name(a) is None  # earlier versions refused such names


def test_a_name_postgres_would_truncate_is_refused():
    assert sink_names.check_table_name("t" * 63) == "t" * 63
    try:
        sink_names.check_table_name("t" * 64)
    except ValueError as err:
        assert "use at most 63 bytes" in str(err)
    else:
        raise AssertionError("a 64-byte name was accepted")


def test_drainers_own_tables_are_the_tables_its_migrations_create():
    """So a new state table is refused as a sink table without anyone remembering to."""
    import re
    from pathlib import Path

    import drainer

    sql = Path(drainer.__file__).resolve().parent.parent / "sql"
    created = {
        name.lower()
        for f in sql.glob("*.sql")
        for name in re.findall(
            r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", f.read_text(), re.IGNORECASE
        )
    }
    assert created | {"schema_migrations"} == set(sink_names.OWN_TABLES)


def test_a_sink_table_that_is_drainers_own_or_needs_quoting_is_refused_at_load(tmp_path):
    """Before: `table: runs` was accepted (and its error advised migrating `runs`), and
    `table: NbOrders` created "NbOrders", which unquoted SQL cannot find."""
    import pytest
    import yaml

    from drainer.config import load_drains
    from drainer.errors import ConfigError
    from tests.support.drains import drain_body

    for table, fix in (
        ("runs", "one of drainer's own state tables: name the sink table after its data"),
        ("NbOrders", "use 'nborders'"),
        ("order", "reserved SQL word"),
    ):
        path = tmp_path / "drains.yaml"
        body = drain_body("d", sink={"type": "postgres", "table": table})
        path.write_text(yaml.safe_dump({"drains": {"d": body}}))
        with pytest.raises(ConfigError, match="d.sink") as info:
            load_drains(path)
        assert fix in str(info.value) and f"'{table}'" in str(info.value)
    for fine in ("orders", "nb_orders", "runs_out"):
        assert sink_names.check_table_name(fine) == fine
