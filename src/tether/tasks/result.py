"""The outcome of one execution, and the state machine it moves through (contract 3 and 4)."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TaskStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    REJECTED = "rejected"
    NOT_FOUND = "not_found"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    def can_become(self, new: TaskStatus) -> bool:
        """True when the transition ``self -> new`` is allowed; staying in place is always allowed."""
        return new is self or new in _TRANSITIONS[self]

    def can_reach(self, new: TaskStatus) -> bool:
        """True when ``new`` may follow ``self`` directly or through ``running``.

        An observer polling a worker can miss the ``running`` it published in between (a task that
        completes within microseconds); adopting ``completed`` from ``pending`` is then correct.
        """
        return self.can_become(new) or (
            self.can_become(TaskStatus.RUNNING) and TaskStatus.RUNNING.can_become(new)
        )


TERMINAL = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.STOPPED, TaskStatus.REJECTED, TaskStatus.NOT_FOUND}
)

# The only place the transition table lives. Terminal states map to nothing: they never change.
_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.PENDING: frozenset(
        {
            TaskStatus.RUNNING,
            TaskStatus.REJECTED,
            TaskStatus.NOT_FOUND,
            # A worker may die or be stopped before its handshake.
            TaskStatus.FAILED,
            TaskStatus.STOPPED,
        }
    ),
    TaskStatus.RUNNING: frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.STOPPED}),
    **{status: frozenset() for status in TERMINAL},
}

# Process exit codes of the CLI, by outcome.
EXIT_CODES: dict[TaskStatus, int] = {
    TaskStatus.COMPLETED: 0,
    TaskStatus.RUNNING: 0,
    TaskStatus.PENDING: 0,
    TaskStatus.FAILED: 1,
    TaskStatus.STOPPED: 1,
    TaskStatus.REJECTED: 2,
    TaskStatus.NOT_FOUND: 2,
}


class TaskResult(BaseModel):
    """What every execution returns, from every interface.

    ``running`` only means the worker completed its start handshake; it never means completed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    execution_id: str
    status: TaskStatus
    message: str = ""
    duration_seconds: float = 0.0
    data: dict[str, Any] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in (TaskStatus.COMPLETED, TaskStatus.RUNNING)

    def with_data(self, **extra: Any) -> TaskResult:
        return self.model_copy(update={"data": {**self.data, **extra}})
