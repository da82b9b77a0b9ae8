"""Typed events: what happened, as a pydantic discriminated union on ``kind``.

Every event is written to the ``events`` table of the store (``tether.store.events``) in the same
transaction as the record it describes, with an id that only grows; any process can read or stream
the log from any id onward (the web page and the supervisor do). The in-process ``EventBus`` fans the
same events out to live subscribers (the CLI's live view) once they are on record; a subscriber that
raises is logged and skipped, never allowed to break a turn.

``topic`` says what an event belongs to: ``thread:<id>`` for a conversation (and the jobs it started),
``job:<execution_id>`` for a job started outside any conversation, ``run:<id>`` for a supervisor run
(and the jobs its tasks started).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

log = logging.getLogger("tether.events")


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int = 0  # assigned by the event log; 0 until the event is on record
    ts: float = Field(default_factory=time.time)
    topic: str


class _TurnEvent(_Event):
    thread_id: str
    turn: int


class TurnStarted(_TurnEvent):
    kind: Literal["turn_started"] = "turn_started"
    message: str
    agent: str = "assistant"  # who answers (its activity is "thinking" from here)


class ModelDecided(_TurnEvent):
    kind: Literal["model_decided"] = "model_decided"
    index: int
    text: str
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    # The call's record (``agent/usage.py``): model, provider, input/output tokens (None: not
    # reported), duration_s, finish_reason. None in events written before calls were measured.
    call: dict[str, Any] | None = None


class ModelThinking(_TurnEvent):
    """A model still working on its answer: told every few seconds of a slow one."""

    kind: Literal["model_thinking"] = "model_thinking"
    index: int
    elapsed_s: float
    tokens: int


class ToolStarted(_TurnEvent):
    kind: Literal["tool_started"] = "tool_started"
    index: int
    tool: str
    args: dict[str, Any]
    execution_id: str | None = None
    # What the agent is busy with (``activity_of``): files, research, documents, system, automation,
    # delegation, jobs or other — what its avatar shows until the next step.
    activity: str = "other"


ACTIVITIES = {
    "workspace": "files",
    "web": "research",
    "documents": "documents",
    "skills": "documents",
    "shell": "system",
    "demo": "automation",
    "agents": "delegation",
    "get_task_status": "jobs",
    "stop_task": "jobs",
}


def activity_of(task_id: str) -> str:
    """The kind of work a tool is, for an agent's activity: by its toolkit (``workspace.*`` → files)."""
    return ACTIVITIES.get(task_id.partition(".")[0], "other")


class ToolProgress(_Event):
    kind: Literal["tool_progress"] = "tool_progress"
    execution_id: str
    fraction: float | None = None
    message: str = ""


class ToolFinished(_TurnEvent):
    kind: Literal["tool_finished"] = "tool_finished"
    index: int
    tool: str
    args: dict[str, Any]
    result: dict[str, Any]


class ConfirmationRequested(_TurnEvent):
    kind: Literal["confirmation_requested"] = "confirmation_requested"
    index: int
    pending_id: str
    tool: str
    args: dict[str, Any]
    digest: str | None
    question: str


class ConfirmationAnswered(_TurnEvent):
    kind: Literal["confirmation_answered"] = "confirmation_answered"
    index: int
    tool: str
    args: dict[str, Any]
    approved: bool


class BudgetReviewed(_TurnEvent):
    kind: Literal["budget_reviewed"] = "budget_reviewed"
    index: int
    review: dict[str, Any]
    extend: int
    reason: str


class TurnFinished(_TurnEvent):
    kind: Literal["turn_finished"] = "turn_finished"
    index: int
    status: str
    final: str


class JobStateChanged(_Event):
    kind: Literal["job_state_changed"] = "job_state_changed"
    execution_id: str
    task_id: str
    status: str
    message: str = ""
    step_id: str | None = None
    # Whether the job runs in the background (only such a job's end is notified): said here so that
    # the notify loop reads no job for the end of every flow task and tool call. None: an event written
    # before it was said, whose job must be read.
    background: bool | None = None


class RunChanged(_Event):
    """A supervisor run changed state (``topic`` is ``run:<id>``)."""

    kind: Literal["run_changed"] = "run_changed"
    run_id: str
    status: str
    message: str = ""


class RunTaskChanged(_Event):
    """A task of a run changed state: started an attempt, ended one, paused for a person, skipped."""

    kind: Literal["run_task_changed"] = "run_task_changed"
    run_id: str
    task_id: str
    status: str
    attempt: int = 0
    message: str = ""
    execution_id: str | None = None


class ArtifactCreated(_Event):
    """A generated file is on record; ``topic`` says what made it (a thread, a run, or a lone job)."""

    kind: Literal["artifact_created"] = "artifact_created"
    artifact_id: int
    execution_id: str
    format: str
    name: str
    size: int
    step_id: str | None = None


class ProactivePosted(_TurnEvent):
    """An agent spoke first: its message is turn ``turn`` of ``thread_id``, from decision ``decision_id``."""

    kind: Literal["proactive_posted"] = "proactive_posted"
    agent: str
    text: str
    category: str
    decision_id: int


Event = Annotated[
    TurnStarted
    | ModelDecided
    | ModelThinking
    | ToolStarted
    | ToolProgress
    | ToolFinished
    | ConfirmationRequested
    | ConfirmationAnswered
    | BudgetReviewed
    | TurnFinished
    | JobStateChanged
    | RunChanged
    | RunTaskChanged
    | ArtifactCreated
    | ProactivePosted,
    Field(discriminator="kind"),
]
EVENT: TypeAdapter[Event] = TypeAdapter(Event)

Subscriber = Callable[[Event], None]


class EventBus:
    """In-process fan-out of events that are already on record."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def emit(self, event: Event) -> None:
        log.debug("%s %s", event.kind, event.topic)
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception("event subscriber %r failed on %s", subscriber, event.kind)
