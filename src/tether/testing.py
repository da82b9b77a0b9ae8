"""Test doubles for the one part tether never runs for real in tests: the language model.

- ``ScriptedModel``: a list of expected turns. Each turn is a ``ModelResponse`` (or a function of the
  messages and tools returning one). It fails the test on a call it did not expect, and
  ``assert_consumed()`` fails it when scripted turns were left unused.
- ``SmallModel``: a scripted model that behaves like a small local one — calls written as text
  (``written``, in the shapes a real one wrote), results it makes up (``made_up_result``), the same call
  again (``repeated``) — read exactly as the real client reads them.
- ``Cassette``: records the HTTP exchange of an OpenAI-compatible client (an ``httpx`` transport) to a
  JSON file and replays it without a server; ``Authorization`` headers are never written.
- ``forbid_model_requests()``: sets the switch that makes real (non-loopback) model requests fail.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tether.models.base import (
    ALLOW_REQUESTS_ENV,
    Message,
    ModelResponse,
    ToolCall,
    ToolDef,
    TurnContext,
    Usage,
)

Turn = ModelResponse | Callable[[Sequence[Message], Sequence[ToolDef]], ModelResponse]


class UnexpectedModelCall(AssertionError):
    pass


def call(name: str, arguments: dict[str, Any] | None = None, *, id: str | None = None) -> ToolCall:
    return ToolCall(
        id=id or f"call_{name}_{abs(hash(json.dumps(arguments or {}, sort_keys=True))) % 10**6}",
        name=name,
        arguments=arguments or {},
    )


def _usage(usage: tuple[int, int] | None) -> Usage:
    return (
        Usage() if usage is None else Usage(prompt_tokens=usage[0], completion_tokens=usage[1], reported=True)
    )


def calls(*items: ToolCall, text: str = "", usage: tuple[int, int] | None = None) -> ModelResponse:
    """A scripted turn that asks for these tool calls (several at once = a parallel-call response);
    ``usage`` is the (input, output) tokens it reports (None: it reports none)."""
    return ModelResponse(text=text, tool_calls=tuple(items), model="scripted", usage=_usage(usage))


def say(
    text: str, *, finish_reason: str | None = None, usage: tuple[int, int] | None = None
) -> ModelResponse:
    """An answer in words; ``finish_reason=tether.models.base.UNABLE`` says the request cannot be done;
    ``usage`` is the (input, output) tokens it reports (None: it reports none)."""
    return ModelResponse(text=text, model="scripted", finish_reason=finish_reason, usage=_usage(usage))


class ScriptedModel:
    provider = "scripted"
    supports_tools = True
    supports_images = False  # set True to be sent the images a person attaches

    def __init__(self, turns: Sequence[Turn], *, name: str = "scripted") -> None:
        self.name = name
        self._turns = list(turns)
        self.requests: list[tuple[list[Message], list[ToolDef]]] = []
        self.contexts: list[TurnContext | None] = []

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], *, context: TurnContext | None = None
    ) -> ModelResponse:
        self.requests.append((list(messages), list(tools)))
        self.contexts.append(context)
        if not self._turns:
            last = messages[-1] if messages else {}
            raise UnexpectedModelCall(
                f"{self.name}: no scripted turn left for call {len(self.requests)}; last "
                f"message: {json.dumps(last, ensure_ascii=False)[:300]}"
            )
        turn = self._turns.pop(0)
        return turn(messages, tools) if callable(turn) else turn

    @property
    def remaining(self) -> int:
        return len(self._turns)

    def assert_consumed(self) -> None:
        if self._turns:
            raise AssertionError(f"{self.name}: {len(self._turns)} scripted turn(s) were never used")


class SmallModel(ScriptedModel):
    """A ``ScriptedModel`` that behaves like a small local model behind an OpenAI-compatible server: its
    scripted answers may be calls written as text (``written``), which are read exactly as the real
    client reads them — taken when they are near misses, sent back once with the repair request (which
    the next scripted turn answers) when they cannot be taken, never returned as the answer."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], *, context: TurnContext | None = None
    ) -> ModelResponse:
        from tether.models import textcalls

        first = await super().complete(messages, tools, context=context)
        if not tools:
            return first

        async def again(why: str) -> ModelResponse:
            repair: list[Message] = [
                *messages,
                {"role": "assistant", "content": first.text},
                {"role": "user", "content": textcalls.repair_request(why)},
            ]
            return await ScriptedModel.complete(self, repair, tools, context=context)

        return await textcalls.settle(first, tools, again)


# How a small local model writes a call as text (Qwen2.5-Coder-1.5B on llama.cpp's llama-server never
# produced a native call: ../shared/notes/real-model.md and tests/**/sessions/real_*.json).
SHAPES = (
    "fenced", "tagged", "bare", "no_prefix", "function_name", "no_arguments", "schema_echo", "in_sentence"
)  # fmt: skip


def written(name: str, arguments: dict[str, Any] | None = None, *, shape: str = "fenced") -> ModelResponse:
    """An answer that writes the call ``name(arguments)`` as text, in one of ``SHAPES`` (for
    ``SmallModel``); ``in_sentence`` cannot be taken as a call and gets the repair request."""
    args = arguments or {}
    short = name.rsplit("__", 1)[-1]
    one = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    pretty = json.dumps({"name": name, "arguments": args}, ensure_ascii=False, indent=2)
    texts = {
        "fenced": f"```json\n{pretty}\n```",
        "tagged": f"<tool_call>\n{one}\n</tool_call>",
        "bare": one,
        "no_prefix": json.dumps({"name": short, "arguments": args}, ensure_ascii=False),
        "function_name": json.dumps({"function_name": name, "arguments": args}, ensure_ascii=False),
        "no_arguments": json.dumps({"name": name}),
        "schema_echo": "<tools>\n"
        + json.dumps(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": "…",
                    "parameters": {"type": "object", "properties": args},
                },
            },
            ensure_ascii=False,
        )
        + "\n</tools>",
        "in_sentence": f"Sure, I will call {one} for you now.",
    }
    if shape not in texts:
        raise ValueError(f"shape is one of {', '.join(SHAPES)}, not {shape!r}")
    return ModelResponse(text=texts[shape], model="small")


def made_up_result(task_id: str, message: str = "done") -> ModelResponse:
    """An answer that writes a tool's result the model imagined, instead of calling the tool (a small
    model does: it claimed a farm that never ran)."""
    result = {
        "task_id": task_id,
        "execution_id": "5ead971d5549f1ba51e",
        "status": "completed",
        "message": message,
    }
    return ModelResponse(text=f"<tool_response>\n{json.dumps(result, ensure_ascii=False)}\n</tool_response>")


def repeated(turn: Turn, times: int) -> list[Turn]:
    """The same answer ``times`` times (a small model repeats a refused call)."""
    return [turn] * times


def forbid_model_requests() -> None:
    os.environ[ALLOW_REQUESTS_ENV] = "0"


class Cassette:
    """An ``httpx.AsyncBaseTransport`` that records to or replays from ``path``.

    ``mode="record"`` forwards to ``inner`` (a real transport) and writes every exchange; ``"replay"``
    answers from the file in order and fails on a request that does not match the next recording.
    """

    def __init__(self, path: Path, *, mode: str = "replay", inner: Any = None) -> None:
        import httpx

        if mode not in ("record", "replay"):
            raise ValueError("mode is 'record' or 'replay'")
        self.path = path
        self.mode = mode
        self._inner = (
            inner if inner is not None else (httpx.AsyncHTTPTransport() if mode == "record" else None)
        )
        self._tape: list[dict[str, Any]] = (
            json.loads(path.read_text(encoding="utf-8")) if mode == "replay" else []
        )
        self._cursor = 0

    def transport(self) -> Any:
        import httpx

        cassette = self

        class _Transport(httpx.AsyncBaseTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                return await cassette._handle(request)

        return _Transport()

    async def _handle(self, request: Any) -> Any:
        import httpx

        body = (await request.aread()).decode("utf-8", errors="replace")
        key = {"method": request.method, "path": request.url.path, "body": _canonical(body)}
        if self.mode == "replay":
            if self._cursor >= len(self._tape):
                raise UnexpectedModelCall(
                    f"cassette {self.path.name}: no recorded exchange left for {key['path']}"
                )
            entry = self._tape[self._cursor]
            if entry["request"] != key:
                raise UnexpectedModelCall(
                    f"cassette {self.path.name}: request {self._cursor} differs from the recording"
                )
            self._cursor += 1
            response = entry["response"]
            return httpx.Response(
                response["status"], headers=response["headers"], content=response["body"].encode()
            )
        assert self._inner is not None
        upstream = await self._inner.handle_async_request(request)
        content = await upstream.aread()
        headers = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")
        }
        self._tape.append(
            {
                "request": key,
                "response": {
                    "status": upstream.status_code,
                    "headers": headers,
                    "body": content.decode("utf-8", errors="replace"),
                },
            }
        )
        self.path.write_text(json.dumps(self._tape, ensure_ascii=False, indent=1), encoding="utf-8")
        return httpx.Response(upstream.status_code, headers=headers, content=content)

    def assert_consumed(self) -> None:
        if self.mode == "replay" and self._cursor != len(self._tape):
            raise AssertionError(
                f"cassette {self.path.name}: {len(self._tape) - self._cursor} exchange(s) unused"
            )


def _canonical(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body
