"""What a failed run attempt tells its user: one error path for every failure, first included.

A run attempt that fails leaves its plan open (the next run resumes it); the user needs one line
saying so, what to do, and the cause. drainer's own errors already say that. Anything else (a
handler's exception arriving through Spark, a database error while staging) becomes `RunFailed`:
one line that ends with the root cause (`drainer.error_text.root_cause`: the innermost error, not
the head of a worker's traceback), points at `-v` for the whole trace and at `drainer status`,
where the stored error is shown. A plan that failed before and fails again says how to end it.
"""

from __future__ import annotations

from drainer.config.kafka_clients import redact
from drainer.error_text import root_cause
from drainer.errors import (
    DrainBusy,
    DrainerError,
    FencedOut,
    PlanKeepsFailing,
    RunFailed,
    ServiceUnavailable,
)


def run_failure(drain: str, run_id: int, attempt: int, err: BaseException) -> DrainerError | None:
    """The error a failed attempt raises instead of `err`, or None to raise `err` itself
    (drainer's own one-line errors on a first attempt, and interrupts)."""
    if not isinstance(err, Exception):
        return None  # an interrupt or exit ends the process as it would
    pointers = f"`drainer -v run {drain}` shows the whole trace, `drainer status {drain}` the error"
    cause = redact(root_cause(err))
    if repeated_failure(err, attempt):
        return PlanKeepsFailing(
            f"run {run_id} of drain '{drain}' failed {attempt} attempts with the same plan: fix "
            f"the cause and run again, or end the plan with `drainer plan abandon {drain} "
            f"--reason TEXT` (audited; commits nothing) so that the next run plans afresh "
            f"({pointers}). Cause: {cause}"
        )
    if isinstance(err, DrainerError):
        return None
    return RunFailed(
        f"run {run_id} of drain '{drain}' failed; its plan stays open and the next "
        f"`drainer run {drain}` retries it with the same ranges ({pointers}). Cause: {cause}"
    )


def repeated_failure(err: BaseException, attempt: int) -> bool:
    """A resumed plan failed again for a reason abandoning it could address.

    Not: a first attempt, an interrupt, a lost lease, another run holding the drain, or a
    service that is down (abandoning would not bring it back).
    """
    return (
        attempt > 1
        and isinstance(err, Exception)
        and not isinstance(err, FencedOut | DrainBusy | ServiceUnavailable | PlanKeepsFailing)
    )
