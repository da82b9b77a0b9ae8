"""The ``Model`` protocol and the values that cross it.

Messages are OpenAI chat-format dicts (``role``, ``content``, ``tool_calls``, ``tool_call_id``): the
lingua franca of every provider tether talks to. Tools are ``ToolDef``s: the JSON schema a remote model
sees, plus the metadata (aliases, catalog words) the offline planner needs.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping, Sequence
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
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""

    def to_message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.text or None}
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

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


class Model(Protocol):
    """Messages and tools in, one decision out. Implementations never execute anything."""

    name: str
    supports_tools: bool

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolDef]) -> ModelResponse: ...


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
