"""User code named by import path (`package.module:function`): processors, handlers, distributors.

One loader and one syntax check for every setting that names code, so every such setting fails
the same way, at load time, with the setting's name and the fix.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

from drainer.errors import ConfigError

IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def check_import_path(path: str, setting: str) -> str:
    """The path itself if it reads `package.module:function`, else a ConfigError with the fix."""
    if not IMPORT_PATH.match(path):
        raise ConfigError(
            f"{setting} {path!r} is not a valid import path: use 'package.module:function'"
        )
    return path


def load_callable(path: str, setting: str) -> Callable[..., Any]:
    """Resolve 'package.module:function'; a bad path names the setting that holds it."""
    check_import_path(path, setting)
    module_name, _, attribute = path.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(
            f"{setting} {path!r}: cannot import module {module_name!r} ({err}); check the "
            "import path 'package.module:function' and that the module is installed"
        ) from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(
                f"{setting} {path!r}: module {module_name!r} has no attribute {attribute!r}; "
                "check the function name after the ':'"
            )
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(
            f"{setting} {path!r} names {type(target).__name__}, not a function: "
            "point it at a callable"
        )
    return target
