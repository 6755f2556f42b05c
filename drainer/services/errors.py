"""Errors of the local development stack.

One exception type, whose message always says what to do next, so the CLI can print it as is.
"""

from __future__ import annotations


class ServiceError(RuntimeError):
    """A local service could not be prepared, started, reached or stopped."""


class ResolutionError(ServiceError):
    """Maven ran but could not resolve the requested artifacts (a fallback may still work)."""
