"""The API's documents (pydantic models of every body it reads and writes) and its errors: one shape,
``{"detail": {"code", "message"}}``, for every refusal, listed in the OpenAPI document."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

# -- the documents -------------------------------------------------------------------------------


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Input(_Doc):
    """A request body: every string in it must be text (a lone surrogate in a JSON string is not, and
    could not be stored)."""

    @model_validator(mode="after")
    def _text(self) -> _Input:
        try:
            json.dumps(self.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError("the body holds a string that is not valid text (a lone surrogate)") from exc
        return self


class ErrorDetail(_Doc):
    code: str
    message: str


class ErrorBody(_Doc):
    detail: ErrorDetail


class Info(_Doc):
    version: str
    model: str
    executor_id: str
    last_event_id: int
    home: str


class Confirmation(_Doc):
    thread_id: str
    pending_id: str
    tool: str
    args: dict[str, Any]
    danger: str | None
    question: str


class Confirmations(_Doc):
    items: list[Confirmation]


class Thread(_Doc):
    thread_id: str
    title: str
    turns: int
    created_at: str
    updated_at: str
    running: bool
    pending: Confirmation | None
    agent: str = Field(default="assistant", description="who answers in this thread")
    parent: str | None = Field(default=None, description="a delegated thread: the step that asked")
    private: bool = Field(default=False, description="nothing from it is remembered")


class ThreadPage(_Doc):
    items: list[Thread]
    next: str | None = Field(description="pass as `before` for the next page; null on the last")


class NewThread(_Input):
    title: str = Field(default="", max_length=200)
    agent: str | None = Field(
        default=None, pattern=r"^[a-z][a-z0-9_-]{0,39}$", description="who answers (GET /api/agents)"
    )


class AgentDoc(_Doc):
    name: str
    description: str
    persona: str
    model: str | None
    language: str | None
    grants: list[str]
    tasks: list[str] = Field(description="the patterns the grants stand for")
    aliases: list[str]
    memory: str
    channel: str | None
    created_at: str
    updated_at: str
    builtin: bool


class Agents(_Doc):
    items: list[AgentDoc]
    bundles: dict[str, list[str]] = Field(description="the grant bundles tether ships")


class AgentInput(_Input):
    description: str | None = Field(default=None, max_length=500)
    persona: str | None = Field(default=None, max_length=20_000)
    model: str | None = Field(default=None, max_length=200)
    language: Literal["auto", "zh", "en"] | None = None
    grants: list[str] | None = Field(default=None, max_length=100)
    aliases: list[str] | None = Field(default=None, max_length=20)
    memory: Literal["on", "off"] | None = None
    channel: str | None = Field(default=None, max_length=200)


class AgentDeleted(_Doc):
    name: str


class NewAgent(AgentInput):
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$")


class Rename(_Input):
    """A thread's change: its title, whether it is private (nothing from it is remembered), or both."""

    title: str | None = Field(default=None, min_length=1, max_length=200)
    private: StrictBool | None = None


class MemoryDoc(_Doc):
    id: int
    agent: str
    kind: str = Field(description="turn (said in a thread) or fact (noted with memory.remember)")
    text: str
    thread_id: str | None
    turn: int | None
    said_at: str
    score: float = 0.0


class MemoryList(_Doc):
    agent: str
    facts: list[MemoryDoc] = Field(description="what it noted about the person, newest first")
    counts: dict[str, int] = Field(description="facts noted and turns remembered")
    hits: list[MemoryDoc] | None = Field(default=None, description="with q: what it would recall for q")


class Forgotten(_Doc):
    forgotten: int


class Deleted(_Doc):
    thread_id: str
    cancelled_turns: int
    stopped_jobs: list[str]
    removed_files: int = 0


class TurnCancelled(_Doc):
    thread_id: str
    turn: int | None = Field(description="the turn that was cancelled; null when none was running")
    cancelled: bool = Field(description="false when there was nothing to cancel")
    stopped_jobs: list[str] = Field(description="the jobs the turn was waiting on, now stopped")


class Message(_Doc):
    turn: int
    role: Literal["user", "assistant"]
    text: str
    status: str
    at: str | None


class Messages(_Doc):
    items: list[Message]


class ImageUpload(_Input):
    name: str = Field(default="image", max_length=200)
    data: str = Field(
        min_length=1, max_length=7_000_000, description="the image's bytes in base64 (PNG, JPEG, GIF, WebP)"
    )


class NewMessage(_Input):
    text: str = Field(min_length=1, max_length=20_000)
    images: list[ImageUpload] = Field(
        default_factory=list, max_length=4, description="images sent with the message (at most 4, 5 MB each)"
    )
    formats: list[Literal["md", "html", "pptx", "pdf"]] = Field(
        default_factory=list, max_length=4, description="the files the person ticked for this turn"
    )


class ArtifactDoc(_Doc):
    artifact_id: int
    thread_id: str | None
    step_id: str | None
    execution_id: str
    format: str
    name: str
    size: int
    created_at: str
    url: str = Field(description="where to download it")


class Artifacts(_Doc):
    items: list[ArtifactDoc]


class Accepted(_Doc):
    thread_id: str
    request_id: str


class Step(_Doc):
    step_id: str
    turn: int
    index: int
    kind: str
    status: str
    tool: str | None
    args: dict[str, Any] | None
    result: dict[str, Any] | None
    text: str
    execution_id: str | None
    call_id: str | None
    created_at: str


class Usage(_Doc):
    """What some model calls cost (``agent/usage.py``): tokens are null when no call reported any."""

    model_calls: int
    reported_calls: int
    input_tokens: int | None
    output_tokens: int | None
    duration_s: float


class TurnUsage(Usage):
    turn: int


class Steps(_Doc):
    items: list[Step]
    # Each turn's model calls, the turns it delegated included (the trace's turn headings).
    usage: list[TurnUsage] = Field(default_factory=list)


class Job(_Doc):
    task_id: str
    execution_id: str
    status: str
    message: str
    duration_seconds: float
    data: dict[str, Any]


class Jobs(_Doc):
    items: list[Job]


class JobLog(_Doc):
    execution_id: str
    text: str


class Attempt(_Doc):
    attempt: int
    execution_id: str
    status: str
    message: str
    duration_seconds: float


class Call(_Doc):
    task: str
    args: dict[str, Any]


class RunTask(_Doc):
    task_id: str
    title: str
    status: str
    attempts: int
    message: str
    needs: list[str]
    review: dict[str, Any] | None
    diagnostics: dict[str, Any]
    call: Call | None
    description: str | None
    steps: list[Attempt]
    usage: Usage | None = None  # its agent attempts' model calls


class Review(_Doc):
    """A goal run's task waiting at its review point for a person's answer."""

    run_id: str
    goal: str
    task: RunTask


class Reviews(_Doc):
    items: list[Review]


class Run(_Doc):
    run_id: str
    status: str
    goal: str
    message: str
    created_at: str
    ended_at: str | None
    tasks: list[RunTask]
    usage: Usage | None = None  # every model call of the run: its goal's planning and its agent tasks


class RunSummary(_Doc):
    run_id: str
    status: str
    goal: str
    message: str
    created_at: str
    ended_at: str | None
    tasks_total: int
    tasks_done: int


class Runs(_Doc):
    items: list[RunSummary]


class NewRun(_Input):
    goal: str = Field(min_length=1, max_length=4000)


class Answer(_Input):
    reason: str = Field(default="", max_length=500)


class Edit(_Input):
    args: dict[str, Any] | None = None
    description: str | None = Field(default=None, max_length=4000)
    reason: str = Field(default="", max_length=500)


class Resumed(_Doc):
    run: Run
    done: str


# -- errors --------------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def printable(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")[:500]


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", what)


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "the request cannot be done as asked (the message says why)"),
        (401, "no valid token"),
        (403, "a cross-site request"),
        (404, "no such thing (or not visible to this caller)"),
        (
            409,
            "the thread is in a turn already (or, to cancel, in one run by another process); a job "
            "that cannot be stopped or read here (it runs on another host, or cannot be stopped: the "
            "message says)",
        ),
        (405, "the path does not take that method"),
        (413, "the request body is too large"),
        (421, "not a loopback host"),
        (503, "too many pages follow the events"),
    )
}
