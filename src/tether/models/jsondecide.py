"""JSON decision mode for models without native tool calls.

The model is told to answer with one JSON object, ``{"thought": …, "action": NAME, "args": {…}}`` or
``{"final": …}``. The answer is parsed leniently; if that fails, the model gets one repair request
naming what was wrong; then the call fails with ``ModelOutputError``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tether.errors import ModelOutputError
from tether.models.base import Message, Model, ModelResponse, ToolCall, ToolDef, TurnContext
from tether.models.jsonfix import loads_lenient

INSTRUCTIONS = """You cannot call tools directly. To act, answer with one JSON object and nothing else:
{{"thought": "<why>", "action": "<tool name>", "args": {{<arguments>}}}}
When you are done, or need to ask the person something, answer:
{{"final": "<your answer to the person>"}}
The tools (name, what it does, JSON schema of args):
{tools}"""


def describe_tools(tools: Sequence[ToolDef]) -> str:
    return "\n".join(
        f"- {t.name}: {t.description}\n  args: {json.dumps(t.parameters, ensure_ascii=False)}" for t in tools
    )


def parse_decision(text: str, names: set[str], index: int = 0) -> ModelResponse | str:
    """A response, or the reason ``text`` is not a valid decision."""
    value = loads_lenient(text)
    if value is None:
        return "the answer contained no JSON object"
    if "final" in value:
        return ModelResponse(text=str(value["final"]))
    action = value.get("action")
    if not isinstance(action, str) or not action:
        return 'the object has neither "final" nor a string "action"'
    if action not in names:
        return f"{action!r} is not a tool; tools are: {', '.join(sorted(names))}"
    args = value.get("args", {})
    if not isinstance(args, dict):
        return '"args" must be an object'
    return ModelResponse(
        text=str(value.get("thought") or ""),
        tool_calls=(ToolCall(id=f"json_{index}", name=action, arguments=args),),
    )


class JsonDecisionModel:
    """Wraps a model that only produces text so that it can still choose tools."""

    supports_tools = True

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = f"{inner.name} (json decisions)"
        self.provider = str(getattr(inner, "provider", "") or "")
        self.supports_images = bool(getattr(inner, "supports_images", False))
        self._calls = 0

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], *, context: TurnContext | None = None
    ) -> ModelResponse:
        if not tools:
            return await self.inner.complete(messages, (), context=context)
        # The tool block never changes between steps: it goes first, merged into the first system
        # message, so that a server's prompt cache reuses it (after the conversation it never could).
        plain = _plain(messages)
        block = INSTRUCTIONS.format(tools=describe_tools(tools))
        if plain and plain[0].get("role") == "system":
            prompt: list[Message] = [
                {"role": "system", "content": f"{block}\n\n{plain[0]['content']}"},
                *plain[1:],
            ]
        else:
            prompt = [{"role": "system", "content": block}, *plain]
        names = {t.name for t in tools}
        first = await self._ask(prompt, context)
        self._calls += 1
        decision = parse_decision(first.text, names, self._calls)
        if isinstance(decision, ModelResponse):
            return decision
        repair = [
            *prompt,
            {"role": "assistant", "content": first.text},
            {
                "role": "user",
                "content": f"That answer cannot be used: {decision}. "
                "Reply again with only one JSON object as described.",
            },
        ]
        second = await self._ask(repair, context)
        decision = parse_decision(second.text, names, self._calls)
        if isinstance(decision, ModelResponse):
            return decision
        raise ModelOutputError(
            f"the model's answer is not a valid JSON decision, even after one repair request: {decision}",
            answer=second.text[:500],
        )

    async def _ask(self, prompt: list[Message], context: TurnContext | None) -> ModelResponse:
        """The inner model's text; an empty answer is one more thing the repair request fixes."""
        try:
            return await self.inner.complete(prompt, (), context=context)
        except ModelOutputError as exc:
            if exc.data.get("finish_reason") is None and "nothing" not in exc.message:
                raise
            return ModelResponse(text="")


def _plain(messages: Sequence[Message]) -> list[Message]:
    """Tool-call messages rewritten as text, for a model that does not know the tool roles."""
    out: list[Message] = []
    for message in messages:
        if message.get("role") == "tool":
            out.append(
                {
                    "role": "user",
                    "content": f"[result of {message.get('name', 'tool')}] {message.get('content')}",
                }
            )
        elif message.get("tool_calls"):
            calls = [
                {"action": c["function"]["name"], "args": json.loads(c["function"]["arguments"] or "{}")}
                for c in message["tool_calls"]
            ]
            out.append(
                {
                    "role": "assistant",
                    "content": json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False),
                }
            )
        else:
            out.append({"role": message["role"], "content": message.get("content") or ""})
    return out
