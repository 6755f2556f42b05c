"""Argument types and the subcommand helper shared by the command groups."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from drainer.config import DrainConfig
    from drainer.settings import Settings

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What `add_subparsers` returns, which each command group's `register` adds its commands to."""


def levels(value: str) -> list[int]:
    try:
        return [int(part) for part in value.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"levels are numbers, like '2' or '0,1': got {value!r}"
        ) from None


def add_command(
    sub: Subcommands,
    name: str,
    func: Callable[[argparse.Namespace], int],
    help_text: str,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(func=func)
    return parser


def get_drain(name: str, settings: Settings) -> DrainConfig:
    """The named drain of the settings' drains file. The config (pydantic, YAML) is imported
    here, by the command that reads it, so `drainer --help` and parsing the arguments never
    import it."""
    from drainer.config import get_drain as load

    return load(name, settings.config_path)
