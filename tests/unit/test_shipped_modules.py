"""Which of the drains' modules a Connect session ships, and the zip that carries them: named by
its content, the same bytes for the same files, another name for an edit."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest

from drainer.spark.shipped_modules import bundle, to_ship, top_level


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's folder on sys.path with a module `shipmod_a` and a package `shippkg_b`."""
    user = tmp_path / "user"
    (user / "shippkg_b" / "sub").mkdir(parents=True)
    (user / "shipmod_a.py").write_text("def transform(df):\n    return df\n")
    (user / "shippkg_b" / "__init__.py").write_text("")
    (user / "shippkg_b" / "sub" / "h.py").write_text("def handle(r):\n    return None\n")
    (user / "shippkg_b" / "__pycache__").mkdir()
    (user / "shippkg_b" / "__pycache__" / "x.py").write_text("skipped")
    monkeypatch.syspath_prepend(str(user))
    return user


def test_the_top_level_module_of_a_callable() -> None:
    assert top_level("pkg.sub.mod:fn") == "pkg"
    assert top_level("mod:fn") == "mod"


def test_the_users_modules_are_shipped_and_drainers_and_installed_ones_are_not(folder) -> None:
    found = to_ship(
        [
            "shipmod_a:transform",
            "shippkg_b.sub.h:handle",
            "spark_jobs.examples:record_echo",  # drainer's own
            "yaml:safe_load",  # installed in this environment
            "not_a_module_here:f",  # the run's own check names it
            "",
        ],
        server_path=None,
    )
    assert sorted(found) == ["shipmod_a", "shippkg_b"]
    root, files = found["shippkg_b"]
    assert root == folder
    assert sorted(p.relative_to(folder).as_posix() for p in files) == [
        "shippkg_b/__init__.py",
        "shippkg_b/sub/h.py",
    ]


def test_a_module_under_the_servers_own_pythonpath_is_not_shipped(folder) -> None:
    server_path = os.pathsep.join(["/somewhere/else", str(folder)])
    assert to_ship(["shipmod_a:transform"], server_path) == {}
    assert list(to_ship(["shipmod_a:transform"], "/somewhere/else")) == ["shipmod_a"]


def test_the_zip_holds_the_modules_at_its_root_and_is_named_by_their_content(
    folder, tmp_path
) -> None:
    modules = to_ship(["shipmod_a:transform", "shippkg_b.sub.h:handle"], None)
    first = bundle(tmp_path / "out", modules)
    assert first is not None and first.tops == ("shipmod_a", "shippkg_b")
    with zipfile.ZipFile(first.path) as archive:
        assert sorted(archive.namelist()) == [
            "shipmod_a.py",
            "shippkg_b/",
            "shippkg_b/__init__.py",
            "shippkg_b/sub/",
            "shippkg_b/sub/h.py",
        ]
    same_bytes = first.path.read_bytes()
    first.path.unlink()
    again = bundle(tmp_path / "out", modules)  # the same files: the same name and bytes
    assert again == first and again.path.read_bytes() == same_bytes

    (folder / "shipmod_a.py").write_text("def transform(df):\n    return df.limit(1)\n")
    edited = bundle(tmp_path / "out", to_ship(["shipmod_a:transform"], None))
    assert edited is not None and edited.digest != first.digest
    assert edited.path != first.path


def test_a_zipped_module_imports_from_the_zip(folder, tmp_path, monkeypatch) -> None:
    """What Spark does with a session's zip: it goes on the workers' sys.path."""
    made = bundle(tmp_path / "out", to_ship(["shippkg_b.sub.h:handle"], None))
    assert made is not None
    monkeypatch.setattr(sys, "path", [str(made.path), *[p for p in sys.path if p != str(folder)]])
    try:
        import shippkg_b.sub.h as h  # type: ignore[import-not-found]

        assert h.__file__ is not None and str(made.path) in h.__file__
    finally:  # later lookups must find the folder's package, not this zip's
        for name in [m for m in sys.modules if m.startswith("shippkg_b")]:
            del sys.modules[name]


def test_nothing_to_ship_makes_no_zip(tmp_path) -> None:
    assert bundle(tmp_path, {}) is None
    assert not list(tmp_path.iterdir())


def test_zips_no_session_used_for_a_week_are_deleted(folder, tmp_path) -> None:
    out = tmp_path / "out"
    old = bundle(out, to_ship(["shipmod_a:transform"], None))
    assert old is not None
    week_ago = old.path.stat().st_mtime - 8 * 86_400
    os.utime(old.path, (week_ago, week_ago))
    (folder / "shipmod_a.py").write_text("def transform(df):\n    return df.limit(2)\n")
    new = bundle(out, to_ship(["shipmod_a:transform"], None))
    assert new is not None and new.path.exists() and not old.path.exists()


def test_the_users_modules_a_shipped_one_imports_are_shipped_too(folder) -> None:
    """`import helpers` beside the processor: the workers import it too."""
    (folder / "shiphelp_c.py").write_text("import json\n\nSCALE = 2\n")
    (folder / "shipmod_a.py").write_text(
        "import json\nimport yaml\nimport shiphelp_c\nfrom shippkg_b.sub import h\n"
        "from . import nothing_here\n\ndef transform(df):\n    return df\n"
    )
    found = to_ship(["shipmod_a:transform"], server_path=None)
    assert sorted(found) == ["shiphelp_c", "shipmod_a", "shippkg_b"]  # not json, not yaml


def test_a_namespace_package_on_the_path_twice_is_one_folder_and_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder without __init__.py (like the checkout's `tests`) reached through two sys.path
    entries that are one folder (PYTHONPATH and the working directory) is shipped: before,
    it counted as a package spread over folders and the server's workers could not import it."""
    user = tmp_path / "user"
    (user / "shipns_c").mkdir(parents=True)
    (user / "shipns_c" / "procs.py").write_text("def transform(df):\n    return df\n")
    monkeypatch.syspath_prepend(str(user))
    monkeypatch.syspath_prepend(str(user) + os.sep)  # the same folder, spelt another way
    found = to_ship(["shipns_c.procs:transform"], "")
    assert list(found) == ["shipns_c"]
    root, files = found["shipns_c"]
    assert root == user and [f.name for f in files] == ["procs.py"]
