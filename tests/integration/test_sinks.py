"""The Postgres sink on the real Postgres: quoted names, one attempt's rows per task, and the
per-run stage table that the commit attaches as the run's partition (or copies, into a plain
target) without blocking the target's readers."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
from psycopg import sql
from sqlalchemy import text

from drainer.settings import load_settings, psycopg_url
from drainer.store import sink_names, sink_partitions, sink_tables
from drainer.store.sink_names import RUN_COLUMN, TASK_COLUMN
from tests.support.stack import get_engine

COLUMNS = [('we"ird col', "text"), ("n", "integer")]
NAMES = [name for name, _ in COLUMNS]


def _url() -> str:
    return psycopg_url(load_settings().database_url)


def _fresh_table(run_id: int = 1, partitioned: bool = True, prefix: str = "sink") -> str:
    table = f"{prefix}_{uuid.uuid4().hex[:8]}"
    sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, run_id, partitioned)
    return table


def _stage(table: str, run_id: int, rows: list[tuple], task: str = "p0") -> None:
    with psycopg.connect(_url()) as conn:
        sink_tables.write_staged(conn, table, NAMES, run_id, task, rows)


def _publish(table: str, run_id: int) -> int:
    with get_engine().begin() as conn:
        return sink_tables.publish_staged(conn, table, run_id)


def _rows(relation: str, run_id: int | None = None) -> list[tuple]:
    where = "" if run_id is None else f' WHERE "{RUN_COLUMN}" = {int(run_id)}'
    query = sql.SQL('SELECT "we""ird col", n FROM {}{} ORDER BY n').format(
        sql.Identifier(relation), sql.SQL(where)
    )
    with psycopg.connect(_url()) as conn:
        return [tuple(r) for r in conn.execute(query)]


def _table(name: str) -> dict | None:
    """pg_class facts about a table of the current schema, None when it does not exist."""
    with get_engine().connect() as conn:
        row = conn.execute(
            text(
                "SELECT c.relkind, c.relispartition, "
                "(SELECT i.inhparent::regclass::text FROM pg_inherits i "
                " WHERE i.inhrelid = c.oid) AS parent "
                "FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace "
                "WHERE c.relname = :t AND s.nspname = current_schema()"
            ),
            {"t": name},
        ).first()
    return None if row is None else row._asdict()


def _partitions(table: str) -> list[str]:
    with get_engine().connect() as conn:
        return sorted(
            r[0]
            for r in conn.execute(
                text(
                    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace s "
                    "ON s.oid = p.relnamespace WHERE p.relname = :t AND s.nspname = current_schema()"
                ),
                {"t": table},
            )
        )


def test_output_columns_are_quoted_identifiers():
    table = _fresh_table()
    _stage(table, 1, [("x", 1), ("y", 2)])
    with get_engine().begin() as conn:
        assert sink_tables.publish_staged(conn, table, 1) == 2
        assert sink_tables.table_columns(conn, table) == NAMES
    assert _rows(table) == [("x", 1), ("y", 2)]


def test_each_run_becomes_its_own_partition_without_copying():
    table = _fresh_table(run_id=11)
    assert _table(table)["relkind"] == "p"
    _stage(table, 11, [("a", 1), ("b", 2)], task="p0")
    _stage(table, 11, [("c", 3)], task="p1")
    assert _publish(table, 11) == 3

    stage = sink_names.stage_name(table, 11)
    # the stage is now the run's partition, not a standalone table, and lost its task column
    assert _table(stage) == {"relkind": "r", "relispartition": True, "parent": table}
    with get_engine().connect() as conn:
        assert sink_tables.table_columns(conn, stage) == NAMES
        assert TASK_COLUMN not in _all_columns(conn, stage)
    assert _rows(table) == [("a", 1), ("b", 2), ("c", 3)]

    sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, 12)  # the next run of the drain
    _stage(table, 12, [("d", 4)])
    assert _publish(table, 12) == 1
    assert _partitions(table) == sorted([stage, sink_names.stage_name(table, 12)])
    assert _rows(table, 12) == [("d", 4)] and len(_rows(table)) == 4


def _all_columns(conn, table: str) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            text(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = :t"
            ),
            {"t": table},
        )
    ]


def test_attaching_skips_the_validation_scan_and_does_not_block_readers():
    """The stage's CHECK constraint proves the partition constraint (Postgres says so at
    DEBUG1 instead of scanning), and the target is locked SHARE UPDATE EXCLUSIVE only: a
    reader of the target proceeds while the commit transaction that attached is still open."""
    table = _fresh_table(run_id=21)
    _stage(table, 21, [("old", 1)])
    _publish(table, 21)
    sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, 22)
    _stage(table, 22, [("new", 2)])
    notices: list[str] = []
    with get_engine().connect() as conn:
        conn.connection.driver_connection.add_notice_handler(
            lambda diag: notices.append(diag.message_primary or "")
        )
        conn.execute(text("SET client_min_messages = debug1"))
        assert sink_tables.publish_staged(conn, table, 22) == 1
        held = conn.execute(
            text(
                "SELECT l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE l.pid = pg_backend_pid() AND c.relname = :t"
            ),
            {"t": table},
        ).scalars()
        assert set(held) == {"ShareUpdateExclusiveLock"}
        with psycopg.connect(_url()) as reader:  # still inside the attaching transaction
            reader.execute("SET lock_timeout = '2s'")
            seen = reader.execute(sql.SQL("SELECT n FROM {}").format(sql.Identifier(table)))
            assert [r[0] for r in seen] == [1]  # the uncommitted partition is not visible yet
        conn.commit()
    stage = sink_names.stage_name(table, 22)
    assert f'partition constraint for table "{stage}" is implied by existing constraints' in (
        notices
    )
    assert _rows(table) == [("old", 1), ("new", 2)]


def test_a_run_that_staged_nothing_leaves_no_partition():
    table = _fresh_table(run_id=31)
    assert _publish(table, 31) == 0
    assert _table(sink_names.stage_name(table, 31)) is None
    assert _partitions(table) == []


def test_a_plain_target_gets_the_rows_copied_and_the_stage_dropped():
    table = _fresh_table(run_id=41, partitioned=False)  # sink.publish: copy
    assert _table(table)["relkind"] == "r"
    _stage(table, 41, [("a", 1), ("b", 2)])
    assert _publish(table, 41) == 2
    assert _rows(table) == [("a", 1), ("b", 2)]
    assert _table(sink_names.stage_name(table, 41)) is None
    sink_tables.ensure_sink_tables(
        get_engine(), table, COLUMNS, 42
    )  # stays plain whatever is asked
    assert _table(table)["relkind"] == "r"
    assert _publish(table, 42) == 0 and _table(sink_names.stage_name(table, 42)) is None


def test_resume_empties_the_stage_and_abandon_drops_it():
    table = _fresh_table(run_id=51)
    _stage(table, 51, [("a", 1)])
    with get_engine().begin() as conn:
        sink_tables.clear_staged(conn, table, 51)  # a resumed run
        assert sink_tables.staged_rows(conn, table, 51) == 0
    assert _table(sink_names.stage_name(table, 51)) is not None  # emptied, kept for the tasks
    _stage(table, 51, [("b", 2)])
    with get_engine().begin() as conn:
        sink_tables.drop_staged(conn, table, 51)  # an abandoned run
    assert _table(sink_names.stage_name(table, 51)) is None
    assert _publish(table, 51) == 0 and _rows(table) == []


def test_a_task_staged_again_replaces_its_rows_in_a_stage_without_indexes():
    """Tasks record themselves in run_stage_tasks with their rows, so the stage needs no index
    (its upkeep doubled each COPY): only a task on record already deletes its earlier rows."""
    table = _fresh_table(run_id=61)
    stage = sink_names.stage_name(table, 61)
    _stage(table, 61, [("a", 1), ("a", 2)], task="p0")
    _stage(table, 61, [("b", 3)], task="p1")
    _stage(table, 61, [("c", 4)], task="p0")  # p0 retried: its first attempt's rows go
    assert _rows(stage) == [("b", 3), ("c", 4)]
    with get_engine().begin() as conn:
        indexes = conn.scalar(
            text("SELECT count(*) FROM pg_indexes WHERE tablename = :t"), {"t": stage}
        )
        assert indexes == 0
        assert _claims(conn, stage) == ["p0", "p1"]
        sink_tables.clear_staged(conn, table, 61)  # a resumed run starts without attempts
        assert _claims(conn, stage) == []
    _stage(table, 61, [("d", 5)], task="p0")
    assert _publish(table, 61) == 1 and _rows(table) == [("d", 5)]
    with get_engine().connect() as conn:
        assert _claims(conn, stage) == []  # published: off record with the stage


def test_the_commit_sums_what_the_tasks_recorded_instead_of_scanning_the_stage():
    """Each task records its row count with its rows; the commit adds them up, so publishing
    reads no staged row. The CSV path leaves the run column to the stage's default."""
    table = _fresh_table(run_id=81)
    stage = sink_names.stage_name(table, 81)
    with psycopg.connect(_url()) as conn:
        lines = [(b'"a",1,p0\n"b",2,p0\n', 2)]
        assert sink_tables.write_staged_csv(conn, table, NAMES, 81, "p0", lines) == 2
    _stage(table, 81, [("c", 3)], task="p1")
    assert _rows(stage, run_id=81) == [("a", 1), ("b", 2), ("c", 3)]
    with get_engine().begin() as conn:
        recorded = conn.execute(
            text("SELECT task, rows FROM run_stage_tasks WHERE stage = :s ORDER BY task"),
            {"s": stage},
        ).all()
        assert [tuple(r) for r in recorded] == [("p0", 2), ("p1", 1)]
        oid = conn.scalar(text("SELECT CAST(:s AS regclass)::oid"), {"s": f'"{stage}"'})
        assert sink_tables.publish_staged(conn, table, 81) == 3
        assert conn.scalar(text("SELECT pg_stat_get_xact_numscans(:o)"), {"o": oid}) == 0
    assert _rows(table) == [("a", 1), ("b", 2), ("c", 3)]


def test_a_stage_whose_tasks_recorded_no_counts_is_counted():
    """Tasks of an earlier version recorded no counts: the commit counts the stage, once."""
    table = _fresh_table(run_id=82)
    stage = sink_names.stage_name(table, 82)
    _stage(table, 82, [("a", 1), ("b", 2)], task="p0")
    _stage(table, 82, [("c", 3)], task="p1")
    with get_engine().begin() as conn:
        conn.execute(
            text("UPDATE run_stage_tasks SET rows = NULL WHERE stage = :s AND task = 'p1'"),
            {"s": stage},
        )
        oid = conn.scalar(text("SELECT CAST(:s AS regclass)::oid"), {"s": f'"{stage}"'})
        assert sink_tables.publish_staged(conn, table, 82) == 3
        assert conn.scalar(text("SELECT pg_stat_get_xact_numscans(:o)"), {"o": oid}) == 1


def test_clearing_a_partitions_chunks_takes_their_records_with_them():
    """Record mode stages a partition in chunks and clears them all on a retry: their
    records go too, or the commit would add up rows that are gone."""
    table = _fresh_table(run_id=83)
    stage = sink_names.stage_name(table, 83)
    for task, n in (("t:0:0", 1), ("t:0:1", 2), ("t:1:0", 3)):
        _stage(table, 83, [("x", n)], task=task)
    with psycopg.connect(_url()) as conn:
        sink_tables.clear_task_partition(conn, table, 83, "t", 0)
    with get_engine().connect() as conn:
        assert _claims(conn, stage) == ["t:1:0"]
    assert _publish(table, 83) == 1 and _rows(table) == [("x", 3)]


def _claims(conn, stage: str) -> list[str]:
    return sorted(
        conn.scalars(text("SELECT task FROM run_stage_tasks WHERE stage = :s"), {"s": stage})
    )


def test_rows_an_earlier_version_staged_are_published_once():
    """An upgrade in the middle of a run: the old shared `<table>_staging` holds its rows."""
    table = _fresh_table(run_id=61, partitioned=False)
    legacy = sink_tables.legacy_staging_name(table)
    with psycopg.connect(_url()) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} ({} text, n integer, {} bigint NOT NULL, {} text NOT NULL)"
            ).format(
                sql.Identifier(legacy),
                sql.Identifier('we"ird col'),
                sql.Identifier(RUN_COLUMN),
                sql.Identifier(TASK_COLUMN),
            )
        )
        insert = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, 'p0')").format(sql.Identifier(legacy))
        for row in [("old", 1, 61), ("old", 2, 61), ("other run", 3, 62), ("resumed", 4, 63)]:
            conn.execute(insert, row)
    _stage(table, 61, [("new", 5)], task="p1")
    assert _publish(table, 61) == 3
    assert _rows(table) == [("old", 1), ("old", 2), ("new", 5)]
    assert _rows(legacy) == [("other run", 3), ("resumed", 4)]
    with get_engine().begin() as conn:
        sink_tables.clear_staged(conn, table, 63)  # run 63 resumes: it stages afresh, in its stage
    assert _rows(legacy) == [("other run", 3)]


def test_long_table_names_get_stage_names_that_fit():
    table = _fresh_table(run_id=987654321, prefix="t" * 50)
    assert len(table) == 59
    stage = sink_names.stage_name(table, 987654321)
    assert stage != table + "_r987654321" and len(stage) <= 63
    _stage(table, 987654321, [("a", 1)])
    assert _publish(table, 987654321) == 1
    assert _partitions(table) == [stage]


def test_converting_a_plain_target_by_the_operations_recipe():
    """docs/operations.md: a plain target becomes partitioned, its old rows one partition."""
    table = _fresh_table(run_id=71, partitioned=False)
    _stage(table, 71, [("a", 1)])
    _publish(table, 71)
    recipe = _recipe("Converting a plain target", table)
    with psycopg.connect(_url(), autocommit=True) as conn:
        conn.execute(recipe)
    assert _table(table)["relkind"] == "p"
    sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, 72)
    _stage(table, 72, [("b", 2)])
    assert _publish(table, 72) == 1
    assert _rows(table) == [("a", 1), ("b", 2)]
    assert sink_names.stage_name(table, 72) in _partitions(table)


def _recipe(heading: str, table: str) -> str:
    """The SQL block under a heading of docs/operations.md, for `events` read `table`."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = doc[doc.index(heading) :]
    block = section.split("```sql", 1)[1].split("```", 1)[0]
    return block.replace("events", table)


def test_two_attempts_of_one_task_leave_one_attempts_rows():
    """Attempt A stages and holds its transaction open; attempt B of the same (run, task)
    starts meanwhile. B must wait for A and then replace A's rows, not add to them."""
    table = _fresh_table(run_id=7)
    a_staging, release_a = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def rows_of_a():
        yield ("a", 1)
        yield ("a", 2)
        a_staging.set()
        release_a.wait(10)
        yield ("a", 3)

    pids: dict[str, int] = {}

    def attempt(name: str, rows) -> None:
        try:
            with psycopg.connect(_url()) as conn:
                pids[name] = conn.info.backend_pid
                sink_tables.write_staged(conn, table, NAMES, 7, "topic:0:100", rows)
        except BaseException as err:  # surfaced by the assertion below
            errors.append(err)

    a = threading.Thread(target=attempt, args=("a", rows_of_a()))
    a.start()
    assert a_staging.wait(10)
    b = threading.Thread(target=attempt, args=("b", [("b", 10), ("b", 20)]))
    b.start()
    # B either finishes at once (no lock: the defect) or its own session waits on A's
    deadline = time.monotonic() + 30
    while b.is_alive() and not _blocks(pids, "a", "b") and time.monotonic() < deadline:
        time.sleep(0.05)
    blocked = b.is_alive() and _blocks(pids, "a", "b")
    release_a.set()
    a.join(10)
    b.join(10)
    assert not errors, errors
    assert blocked, "attempt B never waited on attempt A's lock: the race did not happen"
    # the later attempt's rows only
    assert _rows(sink_names.stage_name(table, 7)) == [("b", 10), ("b", 20)]


def _blocks(pids: dict[str, int], holder: str, waiter: str) -> bool:
    """True while `waiter`'s session waits on a lock `holder`'s session holds (the two
    sessions' own pids, not any waiter in the database)."""
    if holder not in pids or waiter not in pids:
        return False
    with get_engine().connect() as conn:
        blockers = conn.scalar(text("SELECT pg_blocking_pids(:p)"), {"p": pids[waiter]})
        return pids[holder] in blockers


def _users_table(name: str, rows: int = 3) -> None:
    """A table someone else made, that happens to carry a stage's or a legacy staging's name."""
    with psycopg.connect(_url()) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id integer)").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT generate_series(1, %s)").format(sql.Identifier(name)),
            (rows,),
        )


def _count(name: str) -> int:
    with psycopg.connect(_url()) as conn:
        return conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name))
        ).fetchone()[0]


def test_a_table_named_like_a_stage_that_drainer_did_not_create_is_refused_untouched():
    """Before: resume truncated it, abandon dropped it, the commit dropped or attached it."""
    import pytest

    from drainer.errors import ConfigError

    table = _fresh_table(run_id=71)  # the target exists; runs 72.. have no stage yet
    for run_id, step in (
        (72, lambda conn: sink_tables.clear_staged(conn, table, 72)),
        (73, lambda conn: sink_tables.drop_staged(conn, table, 73)),
        (74, lambda conn: sink_tables.publish_staged(conn, table, 74)),
    ):
        _users_table(sink_names.stage_name(table, run_id))
        with pytest.raises(ConfigError) as info, get_engine().begin() as conn:
            step(conn)
        assert sink_names.stage_name(table, run_id) in str(info.value)
        assert "drainer did not create it" in str(info.value)
        assert _count(sink_names.stage_name(table, run_id)) == 3
    _users_table(sink_names.stage_name(table, 75))
    with pytest.raises(ConfigError, match="drainer did not create it"):
        sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, 75)
    assert _count(sink_names.stage_name(table, 75)) == 3
    # drainer's own stages pass the check: stage, resume, publish
    sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, 76)
    _stage(table, 76, [("a", 1)])
    with get_engine().begin() as conn:
        sink_tables.clear_staged(conn, table, 76)
    _stage(table, 76, [("b", 2)])
    assert _publish(table, 76) == 1 and _rows(table) == [("b", 2)]


def test_a_users_table_named_like_the_legacy_staging_is_left_alone():
    """`<sink>_staging` without drainer's columns is not drainer's: no rows of a run are there."""
    table = _fresh_table(run_id=81, partitioned=False)
    _users_table(sink_tables.legacy_staging_name(table))
    _stage(table, 81, [("a", 1)])
    with get_engine().begin() as conn:
        sink_tables.clear_staged(conn, table, 82)
        sink_tables.drop_staged(conn, table, 83)
    assert _publish(table, 81) == 1
    assert _count(sink_tables.legacy_staging_name(table)) == 3


def _fold(table: str) -> None:
    from drainer.sinks.postgres_folds import fold_sink

    fold_sink(get_engine(), table)


def _leaves(table: str) -> dict[str, tuple[int, int, int, bool, str]]:
    """name -> (first, last, runs, listed, parent) of the target's partitions that hold runs."""
    with get_engine().connect() as conn:
        return {
            p.name: (p.first, p.last, p.runs, p.listed, p.parent)
            for p in sink_partitions.partitions(conn, table)
        }


def test_a_run_committing_inside_a_folded_range_is_copied_into_that_fold_once():
    """Run 108 commits after runs 101-107 and 109 were folded into one range 101-109 (another
    drain sharing the target, or a plan resumed late): it cannot be attached, so the commit
    copies its rows into the fold. Without the check the attach would fail the commit with
    'would overlap partition'."""
    ids = [*range(101, 108), 109]
    table = _fresh_table(run_id=ids[0])
    for run_id in ids:
        sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, run_id)
        _stage(table, run_id, [(f"r{run_id}", run_id)])
        assert _publish(table, run_id) == 1
    _fold(table)
    fold = f"{table}_runs_101_109"
    assert _leaves(table) == {fold: (101, 109, 8, False, table)}
    sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, 108)
    _stage(table, 108, [("late", 108), ("late2", 1108)])
    assert _publish(table, 108) == 2
    assert _table(sink_names.stage_name(table, 108)) is None  # copied, then dropped
    assert _leaves(table) == {fold: (101, 109, 8, False, table)}
    assert _rows(fold, 108) == [("late", 108), ("late2", 1108)]
    assert [n for _, n in _rows(table)] == sorted([*ids, 108, 1108])


def test_a_list_target_of_an_earlier_version_gets_its_runs_partition_and_keeps_its_rows():
    """An earlier version's target (PARTITION BY LIST, one listed partition per run): a run
    committed before any upkeep attaches as before; upkeep gives the target `<table>_runs`
    (its DEFAULT, by range) and moves the listed partitions into it; later runs attach there.
    Readers query the same table (same oid) and see every row once throughout."""
    table = f"sink_{uuid.uuid4().hex[:8]}"
    with get_engine().begin() as conn:
        conn.execute(
            text(
                f'CREATE TABLE "{table}" ("we""ird col" text, n integer, '
                f"{RUN_COLUMN} bigint NOT NULL) PARTITION BY LIST ({RUN_COLUMN})"
            )
        )
        oid = conn.scalar(text("SELECT to_regclass(:t)::oid"), {"t": f'"{table}"'})
    for run_id in (1, 2, 3):  # as the earlier version committed them
        sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, run_id)
        _stage(table, run_id, [(f"r{run_id}", run_id)])
        assert _publish(table, run_id) == 1
    assert {v[3] for v in _leaves(table).values()} == {True}  # listed, attached by LIST

    _fold(table)
    runs_parent = f"{table}_runs"
    assert _table(runs_parent) == {"relkind": "p", "relispartition": True, "parent": table}
    assert _leaves(table) == {f"{table}_runs_1_3": (1, 3, 3, False, runs_parent)}

    sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, 4)
    _stage(table, 4, [("r4", 4)])
    assert _publish(table, 4) == 1
    assert _table(sink_names.stage_name(table, 4))["parent"] == runs_parent
    assert [n for _, n in _rows(table)] == [1, 2, 3, 4]
    with get_engine().connect() as conn:
        assert conn.scalar(text("SELECT to_regclass(:t)::oid"), {"t": f'"{table}"'}) == oid


def test_a_late_run_waits_for_the_fold_copying_its_partition_then_lands_once():
    """A fold copies eight tier-1 partitions, one of which covers run 60, whose commit comes
    now. The commit waits for that fold and then copies its rows into the fold's new partition.
    Had it locked the target first, the fold's swap and the commit would deadlock, and Postgres
    would abort one of them ('deadlock detected')."""
    from drainer.sinks.postgres_folds import fold_sink
    from drainer.store.sink_names import literal
    from drainer.store.sink_partitions import fold_comment

    table = _fresh_table(run_id=1)
    with get_engine().begin() as conn:
        for first in range(1, 64, 8):  # eight tier-1 folds of runs 1-64, run 60's rows not in
            name = f"{table}_runs_{first}_{first + 7}"
            conn.execute(text(f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING ALL)'))
            conn.execute(text(f"INSERT INTO \"{name}\" VALUES ('f{first}', {first}, {first})"))
            conn.execute(
                text(
                    f'ALTER TABLE "{table}" ATTACH PARTITION "{name}" '
                    f"FOR VALUES FROM ({first}) TO ({first + 8})"
                )
            )
            conn.execute(text(f'COMMENT ON TABLE "{name}" IS {literal(fold_comment(table, 8))}'))
    sink_tables.ensure_sink_tables(get_engine(), table, COLUMNS, 60)
    _stage(table, 60, [("late", 60)])
    published: list[int] = []
    failed: list[BaseException] = []
    commit_pid: list[int] = []
    waited: list[bool] = []

    def commit() -> None:
        try:
            with get_engine().begin() as conn:
                commit_pid.append(conn.scalar(text("SELECT pg_backend_pid()")))
                published.append(sink_tables.publish_staged(conn, table, 60))
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            failed.append(err)

    committing = threading.Thread(target=commit)

    def checkpoint(point: str) -> None:
        if point != "fold_copied":
            return
        committing.start()  # the fold holds its sources SHARE: the commit must wait for it
        for _ in range(2000):
            if commit_pid:
                with get_engine().connect() as conn:
                    if conn.scalar(text("SELECT pg_blocking_pids(:p)"), {"p": commit_pid[0]}):
                        waited.append(True)
                        return
            if published or failed:
                return
            time.sleep(0.01)

    report = fold_sink(get_engine(), table, checkpoint=checkpoint)
    committing.join(timeout=60)
    assert not failed, failed
    assert waited, "the commit waits for the fold that copies run 60's partition"
    assert report.folds == 1 and published == [1]
    assert _leaves(table) == {f"{table}_runs_1_64": (1, 64, 64, False, table)}
    assert [n for _, n in _rows(table)] == sorted([*range(1, 64, 8), 60])
