"""The local stack's generated secrets: made once, kept private, shown nowhere."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from drainer.local_secrets import (
    CONNECT_TOKEN,
    POSTGRES_PASSWORD,
    ensure_secret,
    read_secret,
    secret_path,
)
from drainer.services.postgres import AUTH, TRUST_RULE
from drainer.settings import DEFAULT_DATABASE_URL, load_settings, local_database_url
from drainer.spark.endpoint import client_url, redacted


def test_a_secret_is_made_once_and_only_its_owner_reads_it(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:  # processes starting at once agree on one secret
        made = set(pool.map(lambda _: ensure_secret(tmp_path, CONNECT_TOKEN), range(16)))
    assert len(made) == 1 and len(made.pop()) >= 32
    path = secret_path(tmp_path, CONNECT_TOKEN)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [CONNECT_TOKEN]  # no temporary left


def test_a_secret_restored_with_a_loose_mode_is_tightened(tmp_path: Path) -> None:
    first = ensure_secret(tmp_path, POSTGRES_PASSWORD)
    secret_path(tmp_path, POSTGRES_PASSWORD).chmod(0o644)
    assert ensure_secret(tmp_path, POSTGRES_PASSWORD) == first
    assert stat.S_IMODE(secret_path(tmp_path, POSTGRES_PASSWORD).stat().st_mode) == 0o600


def test_the_local_database_url_carries_the_password_once_there_is_one(tmp_path: Path) -> None:
    assert local_database_url(tmp_path) == DEFAULT_DATABASE_URL  # before `services up`
    password = ensure_secret(tmp_path, POSTGRES_PASSWORD)
    assert local_database_url(tmp_path) == DEFAULT_DATABASE_URL.replace(
        "//drainer@", f"//drainer:{password}@"
    )


def test_every_trust_rule_initdb_writes_becomes_scram_and_comments_stay() -> None:
    hba = (
        "# If you do not trust all your local users, use another method.\n"
        "local   all             all                                     trust\n"
        "host    all             all             127.0.0.1/32            trust\n"
        "host    replication     all             ::1/128                 trust # dev box\n"
        "hostssl all             all             0.0.0.0/0               md5\n"
    )
    moved = TRUST_RULE.sub(rf"\g<1>{AUTH}\g<2>", hba)
    assert TRUST_RULE.search(moved) is None
    assert moved.count("scram-sha-256") == 3 and "do not trust all" in moved
    assert moved.splitlines()[3].endswith("scram-sha-256 # dev box")
    assert "md5" in moved


def test_the_token_is_in_the_client_url_and_starred_out_of_what_is_shown() -> None:
    url = client_url("sc://localhost:15002", "s3cr3t")
    assert url == "sc://localhost:15002/;token=s3cr3t"
    assert redacted(f"{url};session_id=S") == "sc://localhost:15002/;token=***;session_id=S"
    assert client_url("sc://localhost:15002", None) == "sc://localhost:15002"


def test_redact_reads_the_secret_files_once_not_once_per_line(tmp_path: Path, monkeypatch) -> None:
    """`redact` runs on every log line and error: the settings' secrets are loaded once per
    environment. Fails if each call loads settings (and so reads the secret files) again."""
    import drainer.config.kafka_clients as kafka_clients
    import drainer.settings as settings

    token = ensure_secret(tmp_path, CONNECT_TOKEN)
    monkeypatch.setenv("DRAINER_HOME", str(tmp_path))
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://ops:once-per-env-1@db:5432/drains")
    reads: list[str] = []

    def counting_read_secret(home: Path, name: str) -> str | None:
        reads.append(name)
        return read_secret(home, name)

    monkeypatch.setattr(settings, "read_secret", counting_read_secret)
    line = f"token {token}, password once-per-env-1"
    assert kafka_clients.redact(line) == "token ***, password ***"
    first = len(reads)
    assert first >= 1  # the first call did load the settings (the counter counts)
    for _ in range(100):
        assert kafka_clients.redact(line) == "token ***, password ***"
    assert len(reads) == first, f"{len(reads) - first} more secret-file reads for 100 lines"


def test_a_database_password_changed_in_the_process_is_redacted(tmp_path: Path, monkeypatch):
    """A new DRAINER_DATABASE_URL in the same process: its password is redacted at once (the
    secrets are remembered per environment, not once for good), and the old one still is."""
    from drainer.config.kafka_clients import redact

    monkeypatch.setenv("DRAINER_HOME", str(tmp_path))
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://ops:first-pass-1@db:5432/drains")
    assert redact("first-pass-1") == "***"
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://ops:second%2Fpass-2@db:5432/drains")
    assert redact("url :second%2Fpass-2@, decoded second/pass-2") == "url :***@, decoded ***"


def test_a_secret_file_made_after_the_first_redact_is_redacted(tmp_path: Path, monkeypatch):
    """`drainer services up` in this process makes the token after redact first ran (and
    remembered a home without one): the token is redacted from when it is read."""
    from drainer.config.kafka_clients import redact

    monkeypatch.setenv("DRAINER_HOME", str(tmp_path))
    monkeypatch.setenv("DRAINER_DATABASE_URL", "postgresql://ops:pass-word-3@db:5432/drains")
    assert redact("nothing secret here") == "nothing secret here"
    token = ensure_secret(tmp_path, CONNECT_TOKEN)
    assert redact(f"token={token}") == "token=***"


def test_the_local_server_listens_where_drainer_postgres_port_says(tmp_path: Path) -> None:
    """A second local stack (the suite's serial part runs on one) needs its own port."""
    env = {"DRAINER_HOME": str(tmp_path), "DRAINER_POSTGRES_PORT": "55433"}
    assert load_settings(env).database_url == DEFAULT_DATABASE_URL.replace(":55432/", ":55433/")
    password = ensure_secret(tmp_path, POSTGRES_PASSWORD)
    assert f"//drainer:{password}@127.0.0.1:55433/drainer" in load_settings(env).database_url
    given = {**env, "DRAINER_DATABASE_URL": "postgresql://u:p@db:5432/x"}
    assert ":5432/x" in load_settings(given).database_url  # a URL given wins
