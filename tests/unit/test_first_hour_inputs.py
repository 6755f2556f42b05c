"""Inputs a newcomer gets wrong are refused with one line naming the line, key or setting
(issue 31, item 5): pure checks, no stack."""

from __future__ import annotations

import io

import pytest
import yaml

from drainer.cli.main import main
from drainer.config import get_drain
from drainer.errors import ConfigError
from drainer.kafka.producer import json_line_records
from tests.support.drains import drain_body


def records(text: str) -> list:
    return list(json_line_records(io.StringIO(text)))


def test_a_stdin_object_without_value_is_refused_naming_the_line_and_the_key():
    """Before: `{"key": "k9", "vaule": 1}` went out as a null-key record whose value was the
    whole line."""
    with pytest.raises(ConfigError, match="stdin line 2: unknown key 'vaule'"):
        records('{"key": "k1", "value": 1}\n{"key": "k9", "vaule": 1}\n')
    with pytest.raises(ConfigError, match='stdin line 1 has no "value"'):
        records('{"key": "k9"}\n')


def test_stdin_takes_timestamp_ms_and_headers_and_refuses_a_bare_timestamp():
    """Before: `timestamp` was ignored, so old records could not be produced to try max_wait."""
    [record] = records('{"key": "k", "value": {"a": 1}, "timestamp_ms": 1700000000000, '
                       '"headers": {"trace": "abc"}}\n')  # fmt: skip
    assert record.timestamp_ms == 1_700_000_000_000
    assert record.headers == [("trace", b"abc")] and record.key == b"k"
    assert record.value == b'{"a": 1}'
    with pytest.raises(ConfigError, match="`timestamp_ms`: epoch milliseconds"):
        records('{"value": 1, "timestamp": 1700000000000}\n')
    with pytest.raises(ConfigError, match='"timestamp_ms" must be whole epoch milliseconds'):
        records('{"value": 1, "timestamp_ms": "yesterday"}\n')


def test_a_bad_drain_does_not_block_commands_about_the_others(tmp_path):
    """Before: one bad drain in the file failed `plan` (and every command) of every drain."""
    path = tmp_path / "drains.yaml"
    bad = drain_body("bad", budget=1)  # too small for three levels
    path.write_text(yaml.safe_dump({"drains": {"good": drain_body("good"), "bad": bad}}))
    assert get_drain("good", path).name == "good"
    with pytest.raises(ConfigError, match=r"bad\.budget|set budget >= 7"):
        get_drain("bad", path)  # named when it is used
    with pytest.raises(ConfigError, match=r"no drain named 'other' \(configured: bad, good\)"):
        get_drain("other", path)


def test_rewind_requires_a_reason(capsys):
    """Before: a rewind, audited, could be recorded without saying why."""
    with pytest.raises(SystemExit) as exit_:
        main(["rewind", "events", "--level", "0", "--to-earliest"])
    assert exit_.value.code == 2
    assert "--reason" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["rewind", "events", "--level", "0", "--to-earliest"], "rewind: the following arguments"),
        (["dlq", "frob", "events"], "dlq: argument action: invalid choice: 'frob'"),
        (["runn", "events"], "argument command: invalid choice: 'runn'"),
    ],
)
def test_a_bad_argument_is_one_drainer_line_naming_help_not_a_usage_block(capsys, argv, says):
    """Before: argparse printed rewind's usage wrapped to 3 lines, then the error: 4 lines."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("drainer: ") and says in line, line
    assert line.endswith(" --help` shows the usage"), line


def test_a_null_value_is_a_tombstone_not_the_text_null():
    """Before: `"value": null` went out as the four bytes `null`, so deletes could not be tried."""
    [record] = records('{"key": "k", "value": null}\n')
    assert record.value is None and record.key == b"k"
    [encoded] = list(json_line_records(io.StringIO('{"value": null}\n'), _json, "json"))
    assert encoded.value is None


def _json(value: object) -> bytes:
    import json

    return json.dumps(value).encode()


def test_a_value_that_is_not_json_for_a_json_drain_names_its_line():
    """Before: a 23-31 line JSONDecodeError traceback, exit 1."""
    lines = '{"value": {"id": 1}}\n{"value": "{\\"id\\": 2}"}\n{"value": "not json"}\n'
    with pytest.raises(ConfigError, match=r"stdin line 3: the value is not JSON .*--format string"):
        list(json_line_records(io.StringIO(lines), _json, "json"))
    ok = list(json_line_records(io.StringIO(lines.rsplit("\n", 2)[0] + "\n"), _json, "json"))
    assert [r.value for r in ok] == [b'{"id": 1}', b'{"id": 2}']  # a string value is JSON text


def test_without_an_encoder_text_is_sent_as_it_is():
    """`--format string|bytes`: no json.loads; a string is its text, other values their JSON."""
    got = records('{"value": "not json"}\n{"value": {"a": 1}}\n')
    assert [r.value for r in got] == [b"not json", b'{"a": 1}']


def test_a_value_the_encoder_refuses_names_its_line():
    def refuse(value: object) -> bytes:
        raise ValueError("field 'amount' must be a number")

    with pytest.raises(ConfigError, match=r"stdin line 1: the value does not encode as avro"):
        list(json_line_records(io.StringIO('{"value": {"amount": "x"}}\n'), refuse, "avro"))


def test_a_dead_letters_payload_is_decoded_where_it_can_be():
    from drainer.lifecycle.dlq import payload_text

    assert payload_text(b'{"id":"abc"}') == '{\n  "id": "abc"\n}'
    assert payload_text(b"plain text") == "plain text"
    assert payload_text(b"\xff\xfe") == "2 bytes, not UTF-8: b'\\xff\\xfe'"
    assert payload_text(None) == "null (a tombstone)"
