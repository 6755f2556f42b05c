"""The shared Spark Connect session: one id per endpoint and version of the code."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from drainer.spark.connect_session import code_fingerprint, shared_session_id, with_session_id

ENDPOINT = "sc://127.0.0.1:15002"


def test_the_same_code_reuses_the_session(tmp_path):
    first = shared_session_id(tmp_path, ENDPOINT, "code-a")
    assert uuid.UUID(first).version == 5  # derived from endpoint, code and generation
    assert shared_session_id(tmp_path, ENDPOINT, "code-a") == first


def test_a_temporary_home_shares_the_session_instead_of_leaking_one(tmp_path):
    """Before: each new drainer home (a test's, a container's) drew a random id, so every such
    process left one more session and its worker daemon on the server."""
    first = shared_session_id(tmp_path / "home-1", ENDPOINT, "code-a")
    assert shared_session_id(tmp_path / "home-2", ENDPOINT, "code-a") == first
    # a closed one is walked past the same way from any home: the ids follow one sequence
    second = shared_session_id(tmp_path / "home-2", ENDPOINT, "code-a", closed=first)
    assert second != first
    assert shared_session_id(tmp_path / "home-3", ENDPOINT, "code-a", closed=first) == second


def test_changed_code_or_a_closed_session_gets_a_new_one(tmp_path):
    first = shared_session_id(tmp_path, ENDPOINT, "code-a")
    after_edit = shared_session_id(tmp_path, ENDPOINT, "code-b")
    assert after_edit != first
    after_close = shared_session_id(tmp_path, ENDPOINT, "code-b", closed=after_edit)
    assert after_close not in (first, after_edit)
    # the replacement is what later runs share
    assert shared_session_id(tmp_path, ENDPOINT, "code-b") == after_close


def test_drains_of_different_code_each_keep_their_session(tmp_path):
    a = shared_session_id(tmp_path, ENDPOINT, "code-a")
    b = shared_session_id(tmp_path, ENDPOINT, "code-b")
    assert a != b
    # alternating between them opens no new session (each would be one more worker daemon)
    assert shared_session_id(tmp_path, ENDPOINT, "code-a") == a
    assert shared_session_id(tmp_path, ENDPOINT, "code-b") == b


def test_ids_no_run_used_for_a_week_are_forgotten(tmp_path):
    stale = shared_session_id(tmp_path, ENDPOINT, "old code")
    (old_file,) = tmp_path.iterdir()
    week_ago = time.time() - 8 * 86_400
    os.utime(old_file, (week_ago, week_ago))
    current = shared_session_id(tmp_path, ENDPOINT, "new code")  # a new id prunes
    assert not old_file.exists()
    assert shared_session_id(tmp_path, ENDPOINT, "new code") == current
    # forgotten here, derived again: the server's session (if it is still open) is reused
    assert shared_session_id(tmp_path, ENDPOINT, "old code") == stale


def test_each_endpoint_has_its_own_session(tmp_path):
    here = shared_session_id(tmp_path, ENDPOINT, "code")
    there = shared_session_id(tmp_path, "sc://spark.example:15002", "code")
    assert here != there
    assert shared_session_id(tmp_path, ENDPOINT, "code") == here


def test_a_damaged_session_file_is_replaced(tmp_path):
    shared_session_id(tmp_path, ENDPOINT, "code")
    (file,) = tmp_path.iterdir()
    file.write_text("{not json")
    assert uuid.UUID(shared_session_id(tmp_path, ENDPOINT, "code"))


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("sc://h:15002", "sc://h:15002/;session_id=S"),
        ("sc://h:15002/", "sc://h:15002/;session_id=S"),
        ("sc://h:443/;use_ssl=true", "sc://h:443/;use_ssl=true;session_id=S"),
    ],
)
def test_session_id_joins_the_endpoint_parameters(endpoint, expected):
    assert with_session_id(endpoint, "S") == expected


def test_fingerprint_follows_the_handlers_source(tmp_path, monkeypatch):
    package = tmp_path / "my_handlers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "rules.py"
    module.write_text("def handle(record):\n    return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = ["drainer", "my_handlers.rules:handle"]
    before = code_fingerprint(modules)
    assert code_fingerprint(modules) == before
    module.write_text("def handle(record):\n    return [record]\n")
    os.utime(module, ns=(1, 1))  # a different size and time, whatever the clock's resolution
    assert code_fingerprint(modules) != before
    # a setting the session carries is part of it too
    assert code_fingerprint(modules, extra="shuffle=8") != code_fingerprint(modules)


def test_fingerprint_of_unknown_modules_is_just_the_rest(tmp_path):
    assert code_fingerprint(["no_such_package_xyz.mod:f"]) == code_fingerprint([])


def test_a_dropped_connect_client_is_never_left_to_the_garbage_collector():
    """pyspark's SparkSession.__del__ shuts down the thread pool every Connect client of the
    process shares; run by the collector inside one of its threads, it deadlocked the process.
    A client drainer drops stays referenced, stopped, its server session not released."""
    import gc
    import weakref

    from spark_jobs import session

    class Client:
        release_session_on_close = True
        stopped = False

        def stop(self) -> None:
            self.stopped = True

    client = Client()
    ref = weakref.ref(client)
    session.drop_client(client)  # type: ignore[arg-type]
    del client
    gc.collect()
    kept = ref()
    assert kept is not None and kept.stopped and not kept.release_session_on_close
    session._dropped.remove(kept)  # type: ignore[arg-type]
