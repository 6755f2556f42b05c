"""A user's own handler module, written into a folder of the user's that no server's
PYTHONPATH holds: what the module-shipping tests hand a record-mode drain."""

from __future__ import annotations

import uuid
from pathlib import Path

HANDLER_OUTPUT = "who string, offset long"  # the rows `handle` returns


def write_user_handler(folder: Path, who: str) -> str:
    """`userproc_<suffix>.py` in `folder` (made if missing) with a `handle(record)` that returns
    `{"who": who, "offset": ...}`; its `module:handle` for a drain's `handler`."""
    folder.mkdir(parents=True, exist_ok=True)
    module = f"userproc_{uuid.uuid4().hex[:8]}"
    (folder / f"{module}.py").write_text(
        f"WHO = {who!r}\n\n\ndef handle(record):\n"
        '    return {"who": WHO, "offset": record.offset}\n'
    )
    return f"{module}:handle"
