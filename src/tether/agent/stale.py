"""Stale reads fold: a file the conversation read and a tool then changed is not shown as it was.

A model that edits from an old copy undoes what happened since (seed 001 §4.3.6). When a completed
call changed a file (a task's ``writes`` parameters name its paths), every earlier read of that file
(its ``reads`` parameters) is replaced, in what the model is shown, by a short note that says the copy is
stale and to read the file again. The record of the thread keeps the read as it was; a read made after
the change stays as it is. Paths are compared as the tools take them, relative to the workspace.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tether.models.base import Message
from tether.tasks.spec import TaskSpec


def fold_stale_reads(
    history: Sequence[Message], spec_of: Callable[[str], TaskSpec | None], language: str
) -> list[Message]:
    """``history`` with each read of a file that a later completed call changed folded into a note."""
    out = list(history)
    calls: dict[str, tuple[str, dict[str, Any]]] = {}  # call id → (tool name, arguments)
    reads: dict[str, list[int]] = {}  # path → the tool messages in ``out`` that read it
    for index, message in enumerate(out):
        role = message.get("role")
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                calls[str(call.get("id"))] = (str(function.get("name", "")), _arguments(function))
            continue
        if role != "tool":
            continue
        name, arguments = calls.get(str(message.get("tool_call_id")), ("", {}))
        spec = spec_of(name) if name else None
        if spec is None:
            continue
        for path in _paths(arguments, spec.reads):
            reads.setdefault(path, []).append(index)
        if spec.writes and _completed(message.get("content")):
            for path in _paths(arguments, spec.writes):
                for earlier in reads.pop(path, []):
                    out[earlier] = {**out[earlier], "content": _note(path, spec.task_id, language)}
    return out


def _arguments(function: dict[str, Any]) -> dict[str, Any]:
    raw = function.get("arguments")
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else {}
    except (ValueError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _paths(arguments: dict[str, Any], names: Iterable[str]) -> list[str]:
    found = []
    for name in names:
        value = arguments.get(name)
        if isinstance(value, str) and value.strip():
            path = posixpath.normpath(value.strip().replace("\\", "/"))
            found.append(path[2:] if path.startswith("./") else path)
    return found


def _completed(content: Any) -> bool:
    try:
        result = json.loads(content) if isinstance(content, str) else content
    except (ValueError, RecursionError):
        return False
    return isinstance(result, dict) and result.get("status") == "completed"


def _note(path: str, task_id: str, language: str) -> str:
    if language == "zh":
        return f"（这次读取的内容已过时：之后 {task_id} 改动了 {path}。需要时请重新读取，不要照旧内容修改。）"
    return (
        f"(This read is stale: {task_id} changed {path} after it. Read the file again before relying "
        "on it; do not edit from the old copy.)"
    )
