"""Errors raised by tether.

Every error has a stable ``code`` that survives serialization across processes::

    TetherError                      code
    ├── ConfigError                  config        misuse: bad settings, bad registration
    │   ├── RegistryError            registry      duplicate task id, bad handler path, unknown catalog
    │   └── PlanError                plan          a plan or flow file that cannot run (data: problems)
    ├── ToolError                    tool          something about one task call
    │   ├── ToolNotFound             not_found     unknown, or not exposed to this caller
    │   └── ToolRejected             rejected      invalid params, unconfirmed danger, busy resource
    ├── TaskSignal                   signal        raised BY a handler to end its own task (not a fault)
    │   ├── TaskFailed               failed        fail with a message and data
    │   │   └── PathRefused          path_refused  a workspace path outside the roots (toolkits.workspace)
    │   └── StopRequested            stopped       unwind because a stop was asked for
    ├── LockBusy                     lock_busy     a resource lock is held by another execution
    ├── JobError                     job           the job table or a job's process
    │   └── JobNotFound              job_not_found no such execution id
    ├── StoreError                   store         the database could not be opened or migrated
    │   └── RunEnded                 run_ended     a call of a run that has ended (a cancel) is not started
    ├── ModelError                   model         the language model service failed the run
    │   ├── ModelHTTPError           model_http    an HTTP error status (data: status, provider code)
    │   ├── ModelConnectionError     model_connection  no answer: refused, reset, timed out
    │   ├── ModelRefused             model_refused a permanent content-policy refusal (never retried)
    │   ├── ModelOutputError         model_output  an answer that could not be understood, even after repair
    │   ├── CircuitOpen              circuit_open  the breaker for that service is open; try later
    │   └── ModelRequestsForbidden   model_forbidden  a real model request while tests forbid them
    ├── CredentialError              credential    no key, or the OS keyring is unusable
    └── DocumentError                document      a document that cannot be built (tether.artifacts)
        └── FontMissing              font_missing  the CJK font is not installed (data: package)

Two families, as pydantic-ai keeps them: ``TaskSignal``s are how a handler tells the worker how its
task ends (they become a ``TaskResult``); everything else is a failure of the call or of the run.
The executor never raises for a task outcome, it returns a ``TaskResult``; exceptions are for misuse
of the API and broken infrastructure. Every error pickles with its ``data``, so it crosses process
boundaries intact.
"""

from __future__ import annotations

from typing import Any

MAX_MESSAGE_CHARS = 2_000


class TetherError(Exception):
    """Root of every error tether raises on purpose."""

    code = "tether"

    def __init__(self, message: str, **data: Any) -> None:
        # Bounded wherever it is built: an error may quote what it refuses (a 900 KB task id was
        # echoed whole), and every error is printed, logged and stored somewhere.
        if len(message) > MAX_MESSAGE_CHARS:
            cut = MAX_MESSAGE_CHARS - 40
            message = f"{message[:cut]}… [{len(message) - cut} more characters]"
        super().__init__(message)
        self.message = message
        self.data = data

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep ``data`` across pickling (multiprocessing, forkserver pipes).
        return (_rebuild, (type(self), self.message, self.data))


def _rebuild(cls: type[TetherError], message: str, data: dict[str, Any]) -> TetherError:
    return cls(message, **data)


class ConfigError(TetherError):
    code = "config"


class RegistryError(ConfigError):
    code = "registry"


class PlanError(ConfigError):
    """``data["problems"]``: ``[{"task": id or None, "problem": text}]``, every one found, not the first."""

    code = "plan"


class ToolError(TetherError):
    code = "tool"


class ToolNotFound(ToolError):
    code = "not_found"


class ToolRejected(ToolError):
    code = "rejected"


class TaskSignal(TetherError):
    """Raised by a handler to end its own task; the worker turns it into the task's result."""

    code = "signal"


class TaskFailed(TaskSignal):
    """Raised by a handler: the task ran and failed; ``message`` and ``data`` go into the result."""

    code = "failed"


class StopRequested(TaskSignal):
    """Raised by ``TaskContext.check_stop()`` so a handler unwinds; the worker records ``stopped``."""

    code = "stopped"


class LockBusy(TetherError):
    """A resource lock is held; ``data`` names the holder (execution_id, task_id, pid)."""

    code = "lock_busy"


class JobError(TetherError):
    code = "job"


class JobNotFound(JobError):
    code = "job_not_found"


class StoreError(TetherError):
    code = "store"


class RunEnded(StoreError):
    code = "run_ended"


class ModelError(TetherError):
    code = "model"


class ModelHTTPError(ModelError):
    """``data``: ``status`` (int), ``provider_code`` (str | None), ``retry_after`` (seconds | None)."""

    code = "model_http"


class ModelConnectionError(ModelError):
    code = "model_connection"


class ModelRefused(ModelError):
    code = "model_refused"


class ModelOutputError(ModelError):
    code = "model_output"


class CircuitOpen(ModelError):
    code = "circuit_open"


class ModelRequestsForbidden(ModelError):
    code = "model_forbidden"


class CredentialError(TetherError):
    code = "credential"
