"""Everything the CLI prints: one console pair, one table renderer, one progress bar."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

UNLIMITED_WIDTH = 100_000


class _LazyConsole:
    """A rich Console made on its first use: `drainer --help` and the commands' parsing never
    import rich (tens of milliseconds of a process that may print nothing)."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def real(self) -> Console:
        if self._console is None:
            from rich.console import Console

            if self._stderr:
                self._console = Console(stderr=True)
            else:
                # stdout that is not a terminal (a pipe, a file, CI) gets no width limit: Rich
                # would otherwise cut tables to 80 columns (`lev…`, `2026-11-…`); tables take
                # only the width they need
                self._console = Console(width=None if sys.stdout.isatty() else UNLIMITED_WIDTH)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)


console = cast("Console", _LazyConsole(stderr=False))
err_console = cast("Console", _LazyConsole(stderr=True))


def real_console(lazy: Console) -> Console:
    """The rich Console behind `console` or `err_console`, for rich classes that take one."""
    return cast(_LazyConsole, lazy).real() if isinstance(lazy, _LazyConsole) else lazy


def cell(value: Any) -> str:
    """Numbers with thousands separators, ratios with two decimals, None as empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def human_duration(ms: float | None) -> str:
    """`-` for unknown, else in the largest unit it reaches: `45 s`, `15.0 min`, `2.5 h`, `3.0 d`."""
    if ms is None:
        return "-"
    seconds = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    total: Sequence[Any] | None = None,
    justify: str = "right",
) -> None:
    """A rich table from column names and rows of values (formatted by `cell`)."""
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*(v if isinstance(v, str) else cell(v) for v in row))
    if total is not None:
        table.add_row(*(v if isinstance(v, str) else cell(v) for v in total), style="bold")
    console.print(table)


def progress() -> Progress:
    """A progress bar on stderr, so stdout stays clean for `--json` and pipes."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=real_console(err_console),
        transient=False,
    )
