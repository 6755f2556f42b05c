"""The root cause of a failure, as one line: what every run failure ends with.

A run can fail deep inside Spark: the error the driver sees is a Py4J or Spark Connect error
whose text carries a Python worker's traceback, and the line a user needs (`No module named
'nbproc'`, `invalid input syntax for type double precision: "lots"`) is its last exception line,
hundreds of characters in. Cutting such a text from the front keeps the noise and loses the
cause; these functions find the cause instead, from a live exception or from stored text.
"""

from __future__ import annotations

import re

TRACEBACK = "Traceback (most recent call last):"
# an exception line of a printed traceback: `module.Name: message` (or a bare `Name`), unindented
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning|\w*)(: |$)")
_CHAINED = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)


def root_cause(err: BaseException) -> str:
    """`Type: message` of the innermost error of `err`'s chain, on one line.

    Follows `__cause__` (and an unsuppressed `__context__`) to the innermost error; when that
    error's text carries a worker's traceback (an error raised in a Spark task), the cause is
    the traceback's exception line, not the head of the text.
    """
    seen: set[int] = set()
    inner = err
    while id(inner) not in seen:
        seen.add(id(inner))
        nxt = inner.__cause__ or (None if inner.__suppress_context__ else inner.__context__)
        if nxt is None:
            break
        inner = nxt
    text = str(inner)
    found = cause_in_text(text) if TRACEBACK in text else None
    if found:
        return found
    return one_line(f"{type(inner).__name__}: {text}" if text.strip() else type(inner).__name__)


def cause_in_text(text: str) -> str:
    """The root cause written in an error's text: the exception line of its last traceback
    (where a chain of tracebacks ends), else the text itself, on one line."""
    if TRACEBACK not in text:
        return one_line(text)
    lines = text[text.rindex(TRACEBACK) + len(TRACEBACK) :].splitlines()
    for i, line in enumerate(lines):
        if line.strip() and not line[0].isspace() and _EXCEPTION_LINE.match(line):
            # a multi-line message continues until a blank line or a chaining note
            message = [line]
            for more in lines[i + 1 :]:
                if not more.strip() or more.strip() in _CHAINED or more.startswith("  "):
                    break
                message.append(more)
            return one_line(" ".join(message))
    return one_line(text)


def one_line(text: str, limit: int = 1000) -> str:
    """`text` with its whitespace collapsed to single spaces, at most `limit` characters (a
    message without a traceback says its cause first)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"
