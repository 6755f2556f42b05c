"""A processor's error as one line: where in the user's code it failed and what happens next
(the frames of drainer and pyspark left out; `drainer -v` logs the whole trace)."""

from __future__ import annotations

import re
import traceback
from pathlib import Path

import pyspark

from drainer.config.kafka_clients import redact
from drainer.error_text import cause_in_text
from drainer.errors import ProcessorFailed
from drainer.lifecycle.results import RunContext

_WORKER_TRACEBACK = "Traceback (most recent call last):"
_PYSPARK = str(Path(pyspark.__file__).parent)


def processor_failed(ctx: RunContext, err: Exception, caller: str) -> ProcessorFailed:
    """The processor's error as one line: where in the user's code, what happens next, and
    last the cause.

    drainer's and pyspark's frames add nothing for the processor's author; `drainer -v` logs
    the full trace (the original error is chained).
    """
    summary, frames = user_error(err, caller)
    name = ctx.drain.name
    return ProcessorFailed(
        redact(
            f"processor {ctx.drain.processor} failed{_where(frames)}; run {ctx.run.id} of drain "
            f"'{name}' stays open with its plan and the next `drainer run {name}` retries it "
            f"with the same ranges (`drainer -v run {name}` shows the whole trace): {summary}"
        )
    )


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def _where(frames: list[str]) -> str:
    """` at file:line in function` of the innermost of the user's frames, or nothing."""
    found = [m for m in (_FRAME.match(line) for line in frames) if m]
    if not found:
        return ""
    path, line, function = found[-1].groups()
    return f" at {path}:{line} in {function}"


def user_error(err: BaseException, caller: str) -> tuple[str, list[str]]:
    """`Type: message` of the processor's error, and the frames of its code (no library's).

    An error raised in a Spark task (a UDF) arrives as text carrying the Python worker's
    traceback; one raised while the processor built its DataFrame has a real traceback, whose
    frames after the last of `caller` (the file that called the processor) are the user's.
    """
    text = str(err)
    if _WORKER_TRACEBACK in text:
        lines = [ln for ln in text[text.rindex(_WORKER_TRACEBACK) :].splitlines() if ln.strip()]
        return cause_in_text(text), _user_frame_lines(lines[1:-1])
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    stack = traceback.extract_tb(err.__traceback__)
    calls = [i for i, frame in enumerate(stack) if frame.filename == caller]
    frames = [
        f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n    {frame.line}'
        for frame in stack[calls[-1] + 1 if calls else len(stack) :]
        if not frame.filename.startswith(_PYSPARK)
    ]
    return f"{type(err).__name__}: {first}", "\n".join(frames).splitlines()


def _user_frame_lines(lines: list[str]) -> list[str]:
    """A worker traceback's frame lines without pyspark's frames and the `^^^` markers."""
    kept: list[str] = []
    keep = True
    for line in lines:
        if line.lstrip().startswith("File "):
            keep = _PYSPARK not in line
        if keep and line.strip(" ^~"):
            kept.append(line)
    return kept
