"""A run failure's root cause, found where it is: the innermost error, the worker's last line."""

from __future__ import annotations

from drainer.error_text import cause_in_text, root_cause
from drainer.errors import PlanKeepsFailing, RunFailed
from drainer.lifecycle.failures import run_failure

# the text of the error Spark Connect raised on the driver for a handler module the server's
# workers could not import (observed; the cause is the last traceback's exception line)
CONNECT_WORKER_ERROR = """
  An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/work/wt-31/spark_jobs/modes.py", line 134, in process_partition
    handler = load_callable(handler_path, "handler")
              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/wt-31/drainer/processing/callables.py", line 35, in load_callable
    raise ConfigError(
drainer.errors.ConfigError: handler 'nbproc:wrong': cannot import module 'nbproc' (No module named 'nbproc')

"""

# a Py4J-style error: the worker's traceback, then the JVM's stack after it
PY4J_WORKER_ERROR = (
    "An error occurred while calling o123.collect.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 "
    "failed 1 times, most recent failure: Lost task 0.0 (TID 3): "
    "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
    '  File "/x/pyspark/worker.py", line 1247, in main\n'
    "    process()\n"
    '  File "/x/spark_jobs/sinks.py", line 80, in write_staged\n'
    "    copy.write_row(row)\n"
    'psycopg.errors.InvalidTextRepresentation: invalid input syntax for type double precision: "lots"\n'
    "CONTEXT:  COPY t_r7, line 1, column amount\n"
    "\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException"
    "(PythonRunner.scala:572)\n"
)


def test_the_cause_of_a_connect_worker_error_is_its_last_exception_line():
    assert cause_in_text(CONNECT_WORKER_ERROR) == (
        "drainer.errors.ConfigError: handler 'nbproc:wrong': cannot import module 'nbproc' "
        "(No module named 'nbproc')"
    )


def test_the_cause_of_a_py4j_error_ends_before_the_jvm_stack():
    assert cause_in_text(PY4J_WORKER_ERROR) == (
        "psycopg.errors.InvalidTextRepresentation: invalid input syntax for type double "
        'precision: "lots" CONTEXT: COPY t_r7, line 1, column amount'
    )


def test_the_root_cause_is_the_innermost_error_of_the_chain():
    try:
        try:
            raise KeyError("amount")
        except KeyError as inner:
            raise RuntimeError("handler failed") from inner
    except RuntimeError as outer:
        assert root_cause(outer) == "KeyError: 'amount'"


def test_a_first_failure_ends_with_the_cause_and_points_at_verbose_and_status():
    """Before: the first attempt raised the error itself (a raw traceback, exit 1)."""
    err = RuntimeError(CONNECT_WORKER_ERROR)
    failure = run_failure("orders", 7, 1, err)
    assert isinstance(failure, RunFailed) and failure.exit_code == 2
    text = str(failure)
    assert "\n" not in text
    assert "`drainer -v run orders`" in text and "`drainer status orders`" in text
    assert text.endswith("(No module named 'nbproc')")


def test_a_repeated_failure_ends_with_the_cause_uncut():
    """Before: cut at 300 characters, inside the worker's traceback (`File "…/drainer/…`)."""
    failure = run_failure("orders", 7, 2, RuntimeError(PY4J_WORKER_ERROR))
    assert isinstance(failure, PlanKeepsFailing)
    assert "drainer plan abandon orders --reason TEXT" in str(failure)
    assert str(failure).endswith(
        'for type double precision: "lots" CONTEXT: COPY t_r7, line 1, column amount'
    )


def test_drainers_own_errors_and_interrupts_pass_as_they_are():
    from drainer.errors import ConfigError

    assert run_failure("orders", 7, 1, ConfigError("sink.table: x")) is None
    assert run_failure("orders", 7, 1, KeyboardInterrupt()) is None
