"""Tool calls that a small model writes as text instead of in ``tool_calls``.

Qwen and Hermes-style models write ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``; Llama 3.x
writes a bare ``{"name": …, "parameters": {…}}``; others wrap it in a code fence. Such text is taken as
a call only when the whole answer is the call (no prose around it that a person should read), it names a
tool that was offered, and its arguments fit the tool's schema (only known keys, every required one
there). Anything else stays text: a model quoting JSON to the person is not acting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tether.models.base import ToolCall, ToolDef

TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
FENCED = re.compile(r"^```(?:json|JSON)?\s*\n?(.*?)```$", re.DOTALL)


def _candidates(text: str) -> list[str] | None:
    stripped = text.strip()
    tagged = TAGGED.findall(stripped)
    if tagged:
        rest = TAGGED.sub("", stripped).strip()
        return None if rest else [t for t in tagged if t.strip()]
    fenced = FENCED.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    if stripped.startswith(("{", "[")):
        return [stripped]
    return None


def _decode(raw: str) -> list[dict[str, Any]] | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    items = value if isinstance(value, list) else [value]
    return items if items and all(isinstance(i, dict) for i in items) else None


def _fits(arguments: dict[str, Any], tool: ToolDef) -> bool:
    schema = tool.parameters
    known = set(schema.get("properties") or {})
    return set(schema.get("required") or ()) <= set(arguments) <= known


def calls_in_text(text: str, tools: Sequence[ToolDef]) -> tuple[ToolCall, ...]:
    """The calls ``text`` is made of, or () when it is not entirely well-formed calls to offered tools."""
    candidates = _candidates(text)
    if not candidates:
        return ()
    by_name = {tool.name: tool for tool in tools}
    calls: list[ToolCall] = []
    for raw in candidates:
        items = _decode(raw)
        if items is None:
            return ()
        for item in items:
            function = item.get("function")
            if isinstance(function, dict):  # {"function": {"name": …, "arguments": …}}
                item = function
            name = item.get("name")
            arguments = item.get("arguments", item.get("parameters", {}))
            if isinstance(arguments, str):
                decoded = _decode(arguments) if arguments.strip() else [{}]
                arguments = decoded[0] if decoded and len(decoded) == 1 else None
            if not isinstance(name, str) or name not in by_name or not isinstance(arguments, dict):
                return ()
            if not _fits(arguments, by_name[name]):
                return ()
            calls.append(ToolCall(id=f"text_call_{len(calls)}", name=name, arguments=arguments))
    return tuple(calls)
