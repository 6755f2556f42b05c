"""One error hierarchy: exit codes from one place, and errors that survive a Spark task."""

from __future__ import annotations

import pickle

import pytest

from drainer import errors
from drainer.cli import main
from drainer.errors import (
    CommitConflict,
    ConfigError,
    DatabaseUnavailable,
    DrainBusy,
    DrainerError,
    FencedOut,
    KafkaUnavailable,
    OffsetMapError,
    ServiceError,
    TopicMissing,
)

ALL = [
    value
    for value in vars(errors).values()
    if isinstance(value, type) and issubclass(value, DrainerError)
]


def test_every_error_is_a_drainer_error_with_an_exit_code():
    assert len(ALL) >= 10
    assert {cls.exit_code for cls in ALL} == {2, 3}
    assert DrainBusy.exit_code == 3 and ConfigError.exit_code == 2


# errors whose constructor takes more than a message
SAMPLES = {TopicMissing: lambda: TopicMissing("events", ["events-0"])}


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_errors_survive_pickling_with_their_message(cls):
    err = SAMPLES.get(cls, lambda: cls(f"{cls.__name__}: say what to do"))()
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and str(back) == str(err)
    assert vars(back) == vars(err)  # attributes too, e.g. Kafka's error code


def test_kafka_errors_carry_the_code_and_whether_to_retry():
    err = KafkaUnavailable("Kafka at b:9092 did not answer", code="_TRANSPORT", retriable=True)
    back = pickle.loads(pickle.dumps(err))
    assert (back.code, back.retriable, str(back)) == ("_TRANSPORT", True, str(err))
    plain = KafkaUnavailable("no code given")
    assert (plain.code, plain.retriable) == (None, False)


def test_a_missing_topic_names_it_and_the_command_that_creates_it():
    err = TopicMissing("events", ["events-2"])
    assert str(err) == (
        "topic events-2 of drain 'events' does not exist: create the drain's topics with "
        "`drainer topics create events`"
    )
    assert isinstance(err, KafkaUnavailable)
    assert (err.code, err.retriable, err.topics) == ("UNKNOWN_TOPIC_OR_PART", False, ["events-2"])
    several = TopicMissing("events", ["events-0", "events-1"])
    assert str(several).startswith("topics events-0, events-1 of drain 'events' do not exist")


def test_a_subclass_with_its_own_init_still_unpickles():
    class Detailed(FencedOut):
        def __init__(self, drain: str, fence: int) -> None:
            super().__init__(f"drain {drain} moved past fence {fence}")

    # pickling by reference needs a module-level class: rebuild through the root's reduce
    cls_args = Detailed("events", 7).__reduce__()
    rebuilt = cls_args[0](*cls_args[1])
    assert isinstance(rebuilt, Detailed) and str(rebuilt) == "drain events moved past fence 7"


def test_service_errors_share_one_base():
    for cls in (KafkaUnavailable, DatabaseUnavailable, ServiceError):
        assert issubclass(cls, errors.ServiceUnavailable)
    assert issubclass(CommitConflict, DrainerError)
    assert issubclass(OffsetMapError, ValueError)  # a damaged map is a bad value too


def test_cli_maps_errors_to_exit_codes_in_one_place(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DRAINER_CONFIG", str(tmp_path / "missing.yaml"))
    assert main(["status", "events"]) == 2
    assert "set DRAINER_CONFIG" in capsys.readouterr().err


def test_run_without_an_injected_executor_is_a_clear_error(tmp_path, monkeypatch, capsys):
    config = tmp_path / "drains.yaml"
    config.write_text(
        "drains:\n  d:\n    topic: t\n    group: g\n    levels: 2\n    budget: 10\n"
        "    sink: {table: s}\n"
    )
    monkeypatch.setenv("DRAINER_CONFIG", str(config))
    assert main(["run", "d"]) == 2
    assert "no Spark executor" in capsys.readouterr().err
