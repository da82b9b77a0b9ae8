"""The ``Model`` protocol and the values that cross it.

Messages are OpenAI chat-format dicts (``role``, ``content``, ``tool_calls``, ``tool_call_id``): the
lingua franca of every provider tether talks to. Tools are ``ToolDef``s: the JSON schema a remote model
sees, plus the metadata (aliases, catalog words) the offline planner needs.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlparse

from tether.errors import ModelRequestsForbidden

Message = dict[str, Any]

ALLOW_REQUESTS_ENV = "TETHER_ALLOW_MODEL_REQUESTS"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    # Set when the model's arguments were not a JSON object: the call is answered with this, not run.
    error: str | None = None

    def to_message(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """The tokens a model service says an answer took. ``reported`` is False when it said nothing (the
    offline model, servers that send no usage): the counts are then 0 by default, not a measurement."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reported: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            reported=self.reported or other.reported,
        )


# The finish reason of an answer that says the request cannot be done here (no tool does it, or the
# tool it needs is not set up): the turn ends ``failed``, so a script sees the work was not done.
UNABLE = "unable"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for a durable step's record (``from_dict`` reads it back)."""
        return {
            "text": self.text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments, "error": c.error}
                for c in self.tool_calls
            ],
            "usage": {
                "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens,
                "reported": self.usage.reported,
            },
            "finish_reason": self.finish_reason,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelResponse:
        return cls(
            text=str(data.get("text", "")),
            tool_calls=tuple(
                ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"], error=c.get("error"))
                for c in data.get("tool_calls", ())
            ),
            usage=Usage(**data.get("usage", {})),
            finish_reason=data.get("finish_reason"),
            model=str(data.get("model", "")),
        )

    def to_message(self) -> Message:
        # "" rather than None: some servers (llama-cpp-python) answer HTTP 500 to a null content.
        message: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.to_message() for call in self.tool_calls]
        return message


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolDef:
    """One tool as a model sees it.

    ``value_words[param][canonical]`` lists the words people use for a catalog value; with
    ``depends_on[param] = other``, ``scoped_words[param][value of other][canonical]`` does the same per
    value of the other parameter. Remote models see these folded into the descriptions.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    aliases: tuple[str, ...] = ()
    kind: str = "business"  # or "control"
    danger: str = "safe"
    background: bool = False
    value_words: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    scoped_words: Mapping[str, Mapping[str, Mapping[str, tuple[str, ...]]]] = field(default_factory=dict)
    depends_on: Mapping[str, str] = field(default_factory=dict)
    # What people call each parameter, per language ({"instance_type": {"zh": "副本类型"}}).
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


class ToolOutcome(enum.StrEnum):
    """The ``status`` a tool call's answer carries: a task's own status, or what the loop did instead."""

    COMPLETED = "completed"
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"
    REJECTED = "rejected"
    NOT_FOUND = "not_found"
    SKIPPED = "skipped"  # not run: an earlier call did not complete, or contract 10 forbade it
    NEEDS_CONFIRMATION = "needs_confirmation"  # not run: waiting for the person's consent
    UNKNOWN = "unknown"  # its worker died mid-run: it may or may not have taken effect

    @property
    def ok(self) -> bool:
        return self in (ToolOutcome.COMPLETED, ToolOutcome.RUNNING)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenJob:
    execution_id: str
    task_id: str
    status: str
    progress: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetReview:
    """What a manager model is asked when a turn's step budget ran out."""

    steps_used: int
    completed_steps: int
    failed_steps: int
    extend_by: int
    ceiling: int

    def to_dict(self) -> dict[str, int]:
        return {
            "steps_used": self.steps_used,
            "completed_steps": self.completed_steps,
            "failed_steps": self.failed_steps,
            "extend_by": self.extend_by,
            "ceiling": self.ceiling,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RecalledMemory:
    """Something said in an earlier thread (or a fact noted about the person) that a turn's request is
    about (``agent/recall.py``): what, where and when, for the model to use and cite."""

    thread_id: str | None
    said_at: str
    text: str
    kind: str = "turn"  # turn | fact


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnContext:
    """What the loop knows, as data: models that read prompts see the same in their messages; a model
    that plans in code (the offline planner) reads it here instead of parsing text."""

    open_jobs: tuple[OpenJob, ...] | None = None  # None: not known (the caller did not say)
    # Set when the person's last message answered the call the thread waited on (True: approved).
    answer: bool | None = None
    review: BudgetReview | None = None
    language: str | None = None
    # The person's message was a yes/no, but no call waits for an answer (nothing to confirm).
    stray_answer: bool = False
    # The files the person ticked for this turn (md, html, pptx, pdf); the session sets them on the call.
    formats: tuple[str, ...] = ()
    # Tools of this caller that are not set up in this home: (tool name, why), for the model to explain.
    unavailable: tuple[tuple[str, str], ...] = ()
    # Set when the session asks which formats a request calls for (agent/outputs.py): the request.
    formats_question: str | None = None
    # Told how a slow answer goes while the model works: (seconds since asked, tokens so far).
    progress: Callable[[float, int], Awaitable[None]] | None = None
    # What earlier conversations said that this request is about (``agent/recall.py``), best first.
    memories: tuple[RecalledMemory, ...] = ()


class Model(Protocol):
    """Messages and tools in, one decision out. Implementations never execute anything."""

    name: str
    supports_tools: bool

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], *, context: TurnContext | None = None
    ) -> ModelResponse: ...


def model_requests_allowed() -> bool:
    return os.environ.get(ALLOW_REQUESTS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def check_request_allowed(base_url: str) -> None:
    """Refuse a non-loopback model request while ``TETHER_ALLOW_MODEL_REQUESTS=0`` (the test suite)."""
    if model_requests_allowed():
        return
    host = urlparse(base_url).hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ModelRequestsForbidden(
            f"real model requests are forbidden here ({ALLOW_REQUESTS_ENV}=0); use tether.testing models "
            f"or a server on 127.0.0.1 (asked for {host or base_url!r})"
        )
