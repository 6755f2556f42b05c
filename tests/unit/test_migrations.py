"""The schema migrations live in the top-level sql/ and nowhere else."""

from __future__ import annotations

from pathlib import Path

from drainer.store.engine import migrations, migrations_dir

ROOT = Path(__file__).resolve().parents[2]


def test_a_checkout_reads_the_top_level_sql_folder():
    assert Path(str(migrations_dir())) == ROOT / "sql"
    names = [path.name for _, path in migrations()]
    assert names == sorted(p.name for p in (ROOT / "sql").glob("*.sql"))
    assert names[0] == "001_init.sql"


def test_no_migration_is_left_inside_the_package():
    """A .sql file added under drainer/ (the old home) would never be applied."""
    strays = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "drainer").rglob("*.sql"))
    assert strays == [], f"move {strays} to sql/ (the next free number): migrations live there"


def test_numbering_gaps_are_only_the_documented_ones():
    """A new gap is a typo in a file name; 006 and 008 are explained in sql/README.md."""
    versions = [version for version, _ in migrations()]
    missing = sorted(set(range(1, max(versions) + 1)) - set(versions))
    # 023 is issue 48's (branch upsert2, 023_upsert_counts.sql), merged beside 024 of issue 49:
    # once both are in one tree, 23 is no gap and leaves this list
    documented = [6, 8] if 23 in versions else [6, 8, 23]
    assert missing == documented, (
        f"numbers {missing} are missing from sql/: use the next free number"
    )
