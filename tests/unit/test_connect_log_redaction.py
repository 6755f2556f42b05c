"""The Connect server's console log takes its Python workers' prints: pyspark's foreachBatch
worker prints its Connect URL with the token. A server start blanks such lines out."""

from __future__ import annotations

import stat
from pathlib import Path

from drainer.config.kafka_clients import remember_secret
from drainer.services.connect_logging import redact_log, roll_console_log


def test_a_token_in_the_console_log_is_blanked_and_the_rest_kept(tmp_path: Path) -> None:
    token = "tok-3f9a1c2b7d"
    remember_secret(token)
    log = tmp_path / "console.log"
    before = [
        "WARN something the server said\n",
        "Streaming ForeachBatch worker is starting with url "
        f"sc://localhost:15002/;user_id=;token={token} and sessionId 1234.\n",
        "the last line, without a newline",
    ]
    log.write_text("".join(before))
    log.chmod(0o644)
    redact_log(log)
    after = log.read_text()
    assert token not in after
    assert after == "".join(before).replace(token, "***")
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert not list(tmp_path.glob("*.redacting"))


def test_a_log_without_secrets_is_left_as_it_is(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_text("nothing to hide\n")
    mtime = log.stat().st_mtime_ns
    redact_log(log)
    assert log.read_text() == "nothing to hide\n" and log.stat().st_mtime_ns == mtime
    assert not list(tmp_path.glob("*.redacting"))


def test_a_start_keeps_the_last_servers_console_log_redacted_and_begins_a_new_one(
    tmp_path: Path,
) -> None:
    token = "tok-77e1d0c4a9"
    remember_secret(token)
    log = tmp_path / "console.log"
    (tmp_path / "console.log.1").write_text("the server before last\n")
    log.write_text(f"url sc://localhost:15002/;token={token}\nWARN the last server\n")
    roll_console_log(log)
    assert not log.exists()  # the new server's output starts a new file
    kept = (tmp_path / "console.log.1").read_text()
    assert kept == "url sc://localhost:15002/;token=***\nWARN the last server\n"
    roll_console_log(log)  # no console log yet (a first start): nothing to keep
    assert (tmp_path / "console.log.1").read_text() == kept
