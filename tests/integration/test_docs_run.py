"""The snippets of README.md and docs/*.md run as written against the local stack: the reading
snippets (```python, issue 31, item 6) and every ```bash block (issue 52), which runs or is
marked as not run by the suite with its reason and a cheaper check (see below).

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

import argparse
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from sqlalchemy import text

from drainer.config import load_drains
from drainer.kafka.producer import OutRecord
from drainer.local_secrets import POSTGRES_PASSWORD, secret_path
from drainer.processing.records import Record
from drainer.settings import load_settings
from spark_jobs import drain_job
from tests.support.drains import delete_topics
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


# ---------------------------------------------------------------------------------------------
# The bash snippets of README.md and docs/*.md (issue 52): each runs against the shared stack in
# a scratch folder with its own drains file, or is marked in the markdown, on the line above
# its fence, `<!-- not run by the suite: REASON -->`, and the commands it names are checked
# cheaply (a `drainer` command parses, a `make` target exists, a request body is JSON).

NOT_RUN = re.compile(r"<!-- not run by the suite: (.+?) -->")
BASH_DOCS = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]


def bash_blocks(doc: str) -> list[tuple[str | None, str]]:
    """The ```bash blocks of `doc`, each with the reason it is not run (None: it runs)."""
    found: list[tuple[str | None, str]] = []
    lines = (REPO / doc).read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() != "```bash":
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        marker = NOT_RUN.search(lines[i - 1]) if i else None
        found.append((marker.group(1) if marker else None, "".join(lines[i + 1 : end])))
    return found


# the runnable blocks, by doc and order among its bash blocks, and how the test runs each
RUN = {
    ("docs/airflow.md", 3): "airflow_connection",
    ("docs/configuration.md", 0): "pythonpath",
    ("docs/operations.md", 0): "abandon",
    ("docs/operations.md", 1): "abandon_and_rewind",
    ("docs/operations.md", 2): "dead_letters",
    ("docs/operations.md", 3): "rewinds",
}
EVENTS_HANDLER = """
def handle(record):
    if record.value.startswith(b"bad"):
        raise ValueError(f"offset {record.offset}: a bad record")
    return {"offset": record.offset}
"""


def test_every_bash_snippet_of_the_docs_is_run_or_marked_with_its_reason():
    """A new bash block is either run by `test_the_docs_bash_snippets_run_as_written` or
    marked; a marked one's commands are checked (they parse, their targets exist)."""
    from drainer.cli import build_parser

    unrun = []
    for doc in BASH_DOCS:
        for index, (reason, code) in enumerate(bash_blocks(doc)):
            if reason is None:
                if (doc, index) not in RUN:
                    unrun.append(f"{doc} bash block {index + 1}:\n{code}")
                continue
            assert (doc, index) not in RUN, (doc, index, "marked, yet listed in RUN")
            for command in commands(code):
                check_cheaply(command, build_parser())
    assert not unrun, "run these in RUN, or mark them `<!-- not run by the suite: … -->`:\n" + (
        "\n".join(unrun)
    )


def commands(code: str) -> list[list[str]]:
    """The commands of a block, as bash reads them: comments dropped, continued and quoted
    lines joined, pipelines split."""
    found: list[list[str]] = []
    pending = ""
    for line in code.splitlines(keepends=True):
        pending += line
        if pending.rstrip("\n").endswith("\\"):  # continued on the next line
            continue
        try:
            words = shlex.split(pending.replace("\\\n", " "), comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        pending = ""
        command: list[str] = []
        for word in [*words, "|"]:
            if word == "|":
                found += [command] if command else []
                command = []
            else:
                command.append(word)
    assert not pending, f"an unclosed quote in:\n{code}"
    return found


def check_cheaply(words: list[str], parser: argparse.ArgumentParser) -> None:
    """What a marked block's command names exists: a `drainer` command and its options parse
    (each alternative of `a|b`, [optional] parts included), a `make` target is one, an extra of
    `pip install 'drainer[x]'` is declared, a `dg` component imports, a request body is JSON."""
    program = words[0]
    if program == "drainer":
        plain = [w.strip("[]") for w in words[1:]]
        variants = [[]]
        for word in plain:
            choices = word.split("|") if "|" in word and not word.startswith("-") else [word]
            variants = [v + [c] for v in variants for c in choices]
        for argv in variants:
            try:
                parser.parse_args(argv)
            except SystemExit as exit_:
                raise AssertionError(f"`drainer {' '.join(argv)}` does not parse") from exit_
    elif program == "make":
        for target in words[1:]:
            done = subprocess.run(
                ["make", "-n", "-C", str(REPO), target], capture_output=True, text=True
            )
            assert done.returncode == 0, (target, done.stderr)
    elif program == "pip":
        for extra in re.findall(r"drainer\[([a-z,-]+)\]", " ".join(words)):
            declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
            for name in extra.split(","):
                assert name in declared["optional-dependencies"], name
    elif program == "dg":
        for word in words:
            if word.startswith("drainer.") and word.split(".")[-1][:1].isupper():
                module, _, name = word.rpartition(".")
                assert hasattr(importlib.import_module(module), name), word
    elif program == "curl":
        body = words[words.index("-d") + 1]
        assert isinstance(json.loads(body), dict), body


@pytest.fixture
def docs_folder(tmp_path, stack, monkeypatch):
    """A reader's folder: the drains file the snippets name (`events`, `orders`, unique here),
    their modules, and `drainer` on PATH; the topics deleted afterwards."""
    suffix = uuid.uuid4().hex[:8]
    events, orders = f"events_{suffix}", f"orders_{suffix}"
    [processor] = blocks("docs/configuration.md", "python")[:1]
    (tmp_path / "nbproc.py").write_text(processor)  # the doc's module, as it names it
    (tmp_path / f"docs_events_{suffix}.py").write_text(EVENTS_HANDLER)
    drains = {
        events: {
            "topic": events,
            "group": events,
            "levels": 3,
            "partitions": 4,
            "budget": 100,
            "schedule": None,
            "mode": "record",
            "handler": f"docs_events_{suffix}:handle",
            "output_schema": "offset long",
            "max_attempts": 1,
            "sink": {"type": "postgres", "table": f"{events}_out"},
        },
        orders: {
            "topic": orders,
            "group": orders,
            "levels": 1,
            "partitions": 1,
            "budget": 100,
            "schedule": None,
            "processor": "nbproc:transform",
            "sink": {"type": "postgres", "table": f"{orders}_out"},
        },
    }
    (tmp_path / "drains.yaml").write_text(yaml.safe_dump({"drains": drains}))
    env = {k: v for k, v in os.environ.items() if k != "DRAINER_CONFIG"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(tmp_path)  # the reader's own modules; drainer is installed
    try:
        yield tmp_path, env, {"events": events, "orders": orders}
    finally:
        for drain in load_drains(tmp_path / "drains.yaml").values():
            delete_topics(drain)


def run_bash(folder: Path, env: dict[str, str], code: str, **names: str) -> str:
    """Run a block as a reader would paste it (bash, stopping at the first failing command),
    with the drains' names made unique; its output. A failure shows the block and its error."""
    for doc_name, name in names.items():
        code = re.sub(rf"\b{doc_name}\b", name, code)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, (code, done.stderr[-3000:])
    return done.stdout


def drainer(folder: Path, env: dict[str, str], *args: str) -> str:
    return run_bash(folder, env, shlex.join(["drainer", *args]))


def open_a_plan(name: str, folder: Path) -> None:
    """Leave `name` with an open plan, as a run that failed before its commit leaves it."""
    from drainer.errors import RunFailed
    from drainer.lifecycle.run import drain_once

    def fails(ctx: object) -> object:
        raise RuntimeError("the run's Spark job failed (a test's)")

    with pytest.raises(RunFailed):
        drain_once(load_drains(folder / "drains.yaml")[name], fails, settings=load_settings())


def test_the_docs_bash_snippets_run_as_written(docs_folder):
    """Each runnable block of RUN, in an order a reader could follow: one drain (`events`)
    shared by all, one record-mode run of it; `plan abandon` after a run that failed."""
    folder, env, names = docs_folder
    events, orders = names["events"], names["orders"]
    block = {how: bash_blocks(doc)[index][1] for (doc, index), how in RUN.items()}
    for reason, _ in (bash_blocks(doc)[index] for doc, index in RUN):
        assert reason is None

    # docs/configuration.md: the folder on PYTHONPATH, `services up` (no restart), `plan`
    drainer(folder, env, "topics", "create", orders)  # as README's quick start has it
    code = block["pythonpath"].replace("/path/to/folder", str(folder))
    out = run_bash(folder, env, code, orders=orders)
    assert "restarting" not in out and orders in out, out

    # docs/airflow.md: the connection Airflow reads is one JSON object
    out = run_bash(
        folder, env, block["airflow_connection"] + 'echo "$AIRFLOW_CONN_DRAINER_DEFAULT"'
    )
    assert json.loads(out)["conn_type"] == "drainer", out

    # docs/operations.md: two dead letters (max_attempts: 1), shown, one retried as it is and
    # one with the fixed value of fixed.json; the next run processes both again
    drainer(folder, env, "topics", "create", events)
    lines = "".join(
        json.dumps({"key": "k", "value": value}) + "\n" for value in ("ok", "bad 1", "bad 2")
    )
    run_bash(
        folder,
        env,
        f"drainer produce {events} --level 0 --stdin --format string <<'EOF'\n{lines}EOF\n",
    )
    for _ in range(3):  # a failed record holds back the rest of its partition for a run
        drainer(folder, env, "run", events)
        dead = json.loads(drainer(folder, env, "dlq", "list", events, "--json"))
        if len(dead) == 2:
            break
    assert len(dead) == 2, dead
    (folder / "fixed.json").write_text('{"fixed": true}')
    code = block["dead_letters"]
    code = re.sub(r"\b12\b", str(dead[0]["id"]), re.sub(r"\b13\b", str(dead[1]["id"]), code))
    out = run_bash(folder, env, code, events=events)
    assert "a bad record" in out, out
    # both again, in offset order: the one retried as it was fails again (held back behind
    # it, the fixed one passes a run later)
    for _ in range(3):
        drainer(folder, env, "run", events)
        listed = json.loads(drainer(folder, env, "dlq", "list", events, "--json"))
        if [d["value"] for d in listed] == ["bad 1"]:
            break
    assert [d["value"] for d in listed] == ["bad 1"], listed
    with get_engine().connect() as conn:
        done = conn.execute(text(f'SELECT "offset" FROM {events}_out ORDER BY 1')).scalars().all()
    assert done == [0, 2], done  # "ok", then "bad 2" with the value of fixed.json

    # docs/operations.md: a plan that cannot succeed is abandoned; then a level rewound
    for how in ("abandon", "abandon_and_rewind"):
        drainer(folder, env, "produce", events, "--level", "1", "--count", "2")
        open_a_plan(events, folder)
        run_bash(folder, env, block[how], events=events)
        again = subprocess.run(
            ["drainer", "plan", "abandon", events, "--reason", "again"],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
        )
        assert again.returncode == 2 and "has no open plan" in again.stderr, again.stderr
    run_bash(folder, env, block["rewinds"], events=events)
