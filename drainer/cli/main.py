"""The parser, and the one place where errors become exit codes.

A `DrainerError` is the user's to fix: one line on stderr, exit with its `exit_code` (2, or 3
when another run holds the drain), nothing changed. Ctrl-C is one line too, and exit 130 (the
shell's code for SIGINT). Anything else is a bug and keeps its traceback. Every message and log line passes `drainer.config.kafka_clients.redact` on its way out, so
a secret expanded from the drains file never reaches the terminal.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from drainer.cli import dlq, maintain, produce, runs, services, simulate, status
from drainer.cli.output import err_console, real_console
from drainer.config.kafka_clients import redact
from drainer.errors import DrainerError

if TYPE_CHECKING:  # the run's machinery is imported only by `drainer run` itself
    from drainer.config import DrainConfig
    from drainer.lifecycle.abandon import CommitFinder
    from drainer.lifecycle.run import Executor
    from drainer.settings import Settings

GROUPS = (services, produce, runs, status, dlq, simulate, maintain)
# commands that keep the collector held off past parsing (`pause_collection`): `run` until
# its Spark session is up (spark_jobs.cli), `plan` and `status` to their end, a second away
HELD_COLLECTOR = ("run", "plan", "status")

ExecutorFactory: TypeAlias = "Callable[[], Executor]"
"""Returns the executor of `drainer run` (`drainer.lifecycle.run.Executor`); called only by `run`."""

CheckerFactory: TypeAlias = "Callable[[], Callable[[DrainConfig, Settings, bool], None]]"
"""Returns the check that imports a drain's processor or handler where its run will (`plan`
checks the driver and the Spark tasks, `run` the driver only); raises ConfigError."""

FinderFactory: TypeAlias = "Callable[[], CommitFinder]"
"""Returns the Spark job that looks for an open plan's table commit; called only by `abandon`."""

MaintainerFactory: TypeAlias = "Callable[[], Callable[..., dict[str, Any]]]"
"""Returns the Spark job that compacts and expires a lakehouse table; called only by `maintain`."""


class _Parser(argparse.ArgumentParser):
    """argparse with drainer's one-line errors: a missing or bad argument is one `drainer:`
    line naming `--help` (exit 2), not argparse's usage block, which wraps to several lines."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("drainer").strip()  # "rewind", "plan abandon", ""
        where = f"{command}: " if command else ""
        self.exit(2, f"drainer: {where}{message}; `{self.prog} --help` shows the usage\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="drainer", description="Drain Kafka backlogs by priority, exactly once.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return parser


def main(
    argv: list[str] | None = None,
    executor: ExecutorFactory | None = None,
    maintainer: MaintainerFactory | None = None,
    checker: CheckerFactory | None = None,
    finder: FinderFactory | None = None,
) -> int:
    """Run one command; `executor` supplies the Spark job for `drainer run`, `maintainer` the
    one that `drainer maintain` runs on a lakehouse table, `checker` the import check of a
    drain's code (`plan`, `run`), `finder` the search of a table for an open plan's commit
    (`plan abandon`). The settings are read from the environment here, once, and handed to
    the command (`args.settings`)."""
    args = build_parser().parse_args(argv)
    args.executor = executor
    args.maintainer = maintainer
    args.checker = checker
    args.finder = finder
    _configure_logging(args.verbose)
    if args.command not in HELD_COLLECTOR:
        resume_collection()
    from sqlalchemy.exc import OperationalError

    try:
        from drainer.settings import load_settings

        args.settings = load_settings()
        code: int = args.func(args)
        return code
    except DrainerError as err:
        logging.getLogger("drainer").debug("%s", type(err).__name__, exc_info=True)
        colour = "yellow" if err.exit_code == 3 else "red"
        message = _escape(redact(str(err)))
        # one line however wide the terminal (or pipe): wrapped, a line would read as several
        err_console.print(f"[{colour}]drainer:[/] {message}", highlight=False, soft_wrap=True)
        return err.exit_code
    except KeyboardInterrupt as err:
        logging.getLogger("drainer").debug("interrupted", exc_info=True)
        err_console.print(
            f"[red]drainer:[/] {_escape(interrupted(args, err))}", highlight=False, soft_wrap=True
        )
        return INTERRUPTED
    except OperationalError as err:
        logging.getLogger("drainer").debug("Postgres", exc_info=True)
        err_console.print(
            "[red]drainer:[/] "
            + _escape(
                redact(
                    f"Postgres stopped answering ({err.orig}). Nothing was committed: an "
                    "interrupted run is resumed with the same ranges by the next `drainer run`."
                )
            ),
            highlight=False,
            soft_wrap=True,
        )
        return 2


INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command ended by Ctrl-C


def interrupted(args: argparse.Namespace, err: KeyboardInterrupt) -> str:
    """The one line Ctrl-C leaves: what became of the work, and how to go on.

    A run interrupted before its commit left its plan open (stored before anything was read),
    so the next run resumes it; one interrupted after (`committed_run`, set by
    `drainer.lifecycle.execute`) is committed, and only its after-commit upkeep waits.
    """
    drain = getattr(args, "drain", None)
    if args.command != "run" or not isinstance(drain, str):
        return "interrupted"
    committed = getattr(err, "committed_run", None)
    if committed is not None:
        return (
            f"interrupted after run {committed} of {drain} committed; the next "
            f"`drainer run {drain}` finishes mirroring its offsets"
        )
    return f"interrupted; nothing committed; `drainer run {drain}` resumes the plan"


_paused: list[bool] = []  # non-empty while `pause_collection` holds the collector off


def pause_collection() -> None:
    """Hold the cyclic garbage collector off while the `drainer` process imports its run path.

    A run imports pandas, pyspark's Connect client, SQLAlchemy and pydantic: some 250,000
    objects the collector tracks, walked again and again as they arrived, 0.1-0.15 s of a
    process's 2-4 s. Imports make almost no cyclic garbage. `resume_collection` freezes what
    was made and turns the collector back on; the console script only, never a caller's
    (a test's) process.
    """
    if gc.isenabled():
        gc.disable()
        _paused.append(True)


def resume_collection() -> None:
    """Turn the collector back on after `pause_collection`, past the imports it waited out.

    The objects made so far are frozen: later collections (a run's wait, the Kafka sink's
    produce loop) skip them. Does nothing when the collector was not paused here.
    """
    if _paused:
        _paused.clear()
        gc.freeze()
        gc.enable()


def exit_process(code: int) -> NoReturn:
    """End the `drainer` process with `code`, without the interpreter's last collections.

    At exit Python collects every object the imports made (pyspark, pandas, SQLAlchemy,
    pydantic): 0.3 s of a 2.5 s small run, spent freeing memory the OS takes back at once.
    Frozen objects are skipped; the Postgres pools are closed first, so the server sees each
    connection end cleanly. `atexit` handlers and stream flushes still run. The process only:
    `main` leaves a caller's (a test's) collector alone."""
    engines = sys.modules.get("drainer.store.engine")
    if engines is not None:
        engines.dispose_engines()
    gc.freeze()
    sys.exit(code)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class _Redact(logging.Filter):
    """Blank out secrets from every log record before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def _configure_logging(verbose: bool) -> None:
    from rich.logging import RichHandler

    handler = RichHandler(console=real_console(err_console), show_path=False)
    handler.addFilter(_Redact())
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[handler],
    )
    for noisy in ("py4j", "sqlalchemy", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


if __name__ == "__main__":
    sys.exit(main())
