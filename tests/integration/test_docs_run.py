"""The reading snippets of README.md, docs/lakehouse.md and docs/configuration.md run as written
against the local stack (issue 31, item 6).

Every ```python block of those docs is executed after a Delta drain and an Iceberg drain drained
a small backlog once; the only edits are the ones the docs tell a reader to make (the table:
`events_buckets`, `drains.events_buckets`, `events_lake`). A block that raises fails the test.

The DuckDB and Trino blocks need servers or extensions this machine cannot download (`INSTALL
delta` fetches from DuckDB's own extension site, and there is no Trino), so they are checked
against what they name: the paths and the metadata file exist, the `iceberg_tables` query runs
on Postgres and finds the table pyiceberg reads, and Trino's JDBC settings are the database,
user, catalog and warehouse drainer uses, with the password read from the secret file.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from sqlalchemy import text

from drainer.kafka.producer import OutRecord
from drainer.local_secrets import POSTGRES_PASSWORD, secret_path
from drainer.processing.records import Record
from drainer.settings import load_settings
from spark_jobs import drain_job
from tests.support.stack import get_engine, produce_records

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DOC_HOME_WAREHOUSE = "/home/me/.cache/drainer/warehouse"  # the docs' example warehouse
KEYS = [b"a", b"b", b"a", b"c"]


def blocks(doc: str, lang: str) -> list[str]:
    """The fenced ```lang blocks of a doc, in order ("" for the blocks with no language)."""
    found: list[str] = []
    current: list[str] | None = None
    for line in (REPO / doc).read_text().splitlines(keepends=True):
        fence = line.strip()
        if current is None and fence.startswith("```"):
            current = [] if fence[3:] == lang else None
            if current is None:  # another language's block: skip to its end
                current = ["<skip>"]
        elif current is not None and fence == "```":
            if current[:1] != ["<skip>"]:
                found.append("".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return found


def run_block(code: str, **replace: str) -> dict[str, Any]:
    """Exec one doc block with the placeholders the doc names replaced; its namespace."""
    for placeholder, value in replace.items():
        assert placeholder in code, f"the block no longer names {placeholder!r}:\n{code}"
        code = code.replace(placeholder, value)
    namespace: dict[str, Any] = {"__name__": "doc_block"}
    exec(compile(code, "<doc block>", "exec"), namespace)
    return namespace


@pytest.fixture
def drained(make_drain, lakehouse, tmp_path, monkeypatch):
    """A Delta drain (the default processor, time buckets) and an Iceberg drain whose processor
    is docs/configuration.md's example, each drained once from a 4-record backlog."""
    [processor] = blocks("docs/configuration.md", "python")[:1]
    module = f"docs_processor_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(processor)
    monkeypatch.syspath_prepend(str(tmp_path))
    suffix = uuid.uuid4().hex[:8]
    delta = make_drain(levels=1, partitions=1, sink={"type": "delta", "path": f"docs_{suffix}"})
    iceberg = make_drain(
        levels=1,
        partitions=1,
        processor=f"{module}:transform",
        sink={"type": "iceberg", "table": f"drains.docs_{suffix}"},
    )
    # the README's: the demo's typed drain, one row per record with its metadata columns
    typed = make_drain(
        levels=1,
        partitions=1,
        processor=None,
        value={"format": "string"},
        sink={"type": "delta", "path": f"docs_typed_{suffix}"},
    )
    for drain in (delta, iceberg, typed):
        produce_records(drain, [OutRecord(value=b"x" * 10, key=k) for k in KEYS], 0)
        assert drain_job.run(drain, settings=load_settings()).drained == len(KEYS)
    return delta, iceberg, typed


def test_the_docs_reading_snippets_run_as_written_against_the_local_stack(drained):
    delta, iceberg, typed = drained
    delta_path, iceberg_table = delta.sink.path, iceberg.sink.table
    assert delta_path and iceberg_table

    reading = blocks("docs/lakehouse.md", "python")
    assert len(reading) == 3, "a new Python block in docs/lakehouse.md: run it here too"
    delta_block, iceberg_block, _routed = reading  # the routed tables': its own test below
    df = run_block(delta_block, events_buckets=delta_path)["df"]
    assert df["records"].sum() == len(KEYS)  # time buckets: the records per key and minute
    found = run_block(iceberg_block, **{"drains.events_buckets": iceberg_table})
    df = found["df"]
    # docs/configuration.md's processor: level, key and the value's size per record
    assert sorted(df["key"]) == sorted(k.decode() for k in KEYS) and set(df["size"]) == {10}
    metadata_location = found["table"].metadata_location

    [readme_block] = blocks("README.md", "python")
    readme_df = run_block(readme_block, events_typed=typed.sink.path)["df"]
    assert set(readme_df.groupby("_level").size().index) == {0}

    # docs/configuration.md: the processor ran as the Iceberg drain's above; the handler here
    processor_block, handler_block = blocks("docs/configuration.md", "python")
    handle = run_block(handler_block)["handle"]
    record = Record("t-0", 0, 0, 0, b"k", b'{"id": 7, "amount": 2.5}')
    assert handle(record) == {"order_id": 7, "amount": 2.5}
    with pytest.raises(ValueError):  # "a record that cannot be decoded fails like any other"
        handle(Record("t-0", 0, 1, 0, b"k", b"not json"))

    check_the_duckdb_and_trino_blocks(delta_path, iceberg_table, metadata_location)
    assert processor_block  # (ran above, as the Iceberg drain's processor)


def test_the_docs_routed_tables_snippet_reads_each_table(make_drain, lakehouse):
    """docs/lakehouse.md's reader of a routed drain's tables, for a drain that routed 2 types."""
    suffix = uuid.uuid4().hex[:8]
    drain = make_drain(
        levels=1,
        partitions=1,
        value={"format": "json", "schema": "event_type string, n int"},
        sink={"type": "delta", "path": f"docs_routes_{suffix}/{{event_type}}"},
    )
    values = [b'{"event_type": "orders", "n": 1}', b'{"event_type": "clicks", "n": 2}'] * 2
    produce_records(
        drain, [OutRecord(value=v, key=k) for v, k in zip(values, KEYS, strict=True)], 0
    )
    assert drain_job.run(drain, settings=load_settings()).drained == len(KEYS)
    routed_block = blocks("docs/lakehouse.md", "python")[2]
    frames = run_block(routed_block, **{'"shop"': f'"{drain.name}"'})["frames"]
    assert {name: len(df) for name, df in frames.items()} == {
        f"docs_routes_{suffix}/clicks": 2,
        f"docs_routes_{suffix}/orders": 2,
    }


def check_the_duckdb_and_trino_blocks(
    delta_path: str, iceberg_table: str, metadata_location: str
) -> None:
    """The blocks this machine cannot run name what exists: the DuckDB scans' Delta folder and
    Iceberg metadata file, the Postgres query that finds that file, Trino's JDBC catalog."""
    settings = load_settings()
    # DuckDB: the paths it scans, with the reader's home for /home/me
    warehouse = Path(settings.warehouse)
    sql = "\n".join(blocks("docs/lakehouse.md", "sql") + blocks("README.md", "sql"))
    [delta_scan, readme_scan] = re.findall(r"delta_scan\('([^']+)'\)", sql)
    assert readme_scan == f"{DOC_HOME_WAREHOUSE}/events_typed"
    scanned = Path(
        delta_scan.replace(DOC_HOME_WAREHOUSE, str(warehouse)).replace("events_buckets", delta_path)
    )
    assert (scanned / "_delta_log").is_dir(), scanned
    [iceberg_scan] = re.findall(r"iceberg_scan\('([^']+)'\)", sql)
    namespace, name = iceberg_table.split(".")
    pattern = re.escape(
        iceberg_scan.replace(DOC_HOME_WAREHOUSE, str(warehouse.resolve())).replace(
            "drains/events_buckets", f"{namespace}/{name}"
        )
    ).replace(re.escape("<n>-<uuid>"), r"\d+-[0-9a-f-]+")
    local = re.sub(r"^file:/*", "/", metadata_location)  # file:/… or file:///…
    assert re.fullmatch(pattern, local), (pattern, metadata_location)
    assert Path(local).is_file()
    # the commented Postgres query that finds the metadata file runs and finds it
    [query] = re.findall(r"-- (SELECT metadata_location .*?)\n--(.*?;)", sql, re.S)
    assert namespace == "drains"
    statement = f"{query[0]} {query[1]}".replace("events_buckets", name)
    with get_engine().connect() as conn:
        assert conn.execute(text(statement)).scalar_one() == metadata_location

    # Trino: the JDBC catalog drainer uses, the password from the file services up made
    [trino] = [b for b in blocks("docs/lakehouse.md", "") if "connector.name=iceberg" in b]
    props = dict(line.split("=", 1) for line in trino.splitlines() if line.strip())
    url = urlparse(settings.database_url)
    assert props["iceberg.jdbc-catalog.connection-url"] == (
        f"jdbc:postgresql://{url.hostname}:{url.port}{url.path}"
    )
    assert props["iceberg.jdbc-catalog.connection-user"] == url.username
    assert props["iceberg.jdbc-catalog.catalog-name"] == "drainer"
    assert props["iceberg.jdbc-catalog.connection-password"] == "${ENV:DRAINER_PG_PASSWORD}"
    doc = (REPO / "docs/lakehouse.md").read_text()
    [secret_file] = re.findall(r"DRAINER_PG_PASSWORD=\$\(cat ([^)]+)\)", doc)
    assert Path(secret_file).expanduser() == secret_path(settings.home, POSTGRES_PASSWORD)
    assert url.password == secret_path(settings.home, POSTGRES_PASSWORD).read_text().strip()
    assert props["iceberg.jdbc-catalog.default-warehouse-dir"] == f"file://{DOC_HOME_WAREHOUSE}"
