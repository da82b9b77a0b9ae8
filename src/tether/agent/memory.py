"""Dialogue memory: the last messages stay verbatim, older ones fold into a running summary.

The summary is extractive — every line quotes what was said or what a tool returned, so it can keep the
person's goals, preferences, agreements and the open questions without inventing anything. It rides in
the system prompt; folding is triggered by message count or by characters (settings).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tether.models.replies import is_no, is_yes

PREFERENCE = re.compile(
    r"(喜欢|偏好|以后|总是|每次|不要|别|优先|记住"
    r"|prefer|always|never|from now on|remember|don't|do not|rather)",
    re.IGNORECASE,
)
LINE_CHARS = 200
KEPT_KINDS = ("preference", "agreement")  # outlive older goals when the summary must shrink


def chars(messages: Sequence[dict[str, Any]]) -> int:
    return sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)


def needs_folding(messages: Sequence[dict[str, Any]], *, after_messages: int, after_chars: int) -> bool:
    return len(messages) > after_messages or chars(messages) > after_chars


def split_point(messages: Sequence[dict[str, Any]], keep_last: int) -> int:
    """Where the verbatim tail starts: at most ``keep_last`` messages, beginning at a person's message
    so that no tool result is kept without the call it answers."""
    start = max(0, len(messages) - keep_last)
    while start < len(messages) and messages[start].get("role") != "user":
        start += 1
    return start


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1] + "…"


def summary_lines(messages: Sequence[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    last_assistant: str | None = None
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "user" and isinstance(content, str) and content.strip():
            if is_yes(content) or is_no(content):
                kind = "agreement"
            elif PREFERENCE.search(content):
                kind = "preference"
            else:
                kind = "goal"
            lines.append(f"[{kind}] person: {_clip(content)}")
            last_assistant = None
        elif role == "assistant" and isinstance(content, str) and content.strip():
            last_assistant = content
        elif role == "tool":
            try:
                result = json.loads(str(content))
            except ValueError:
                continue
            if isinstance(result, dict) and result.get("status"):
                said = _clip(str(result.get("message", "")))
                lines.append(f"[result] {result.get('task_id')} {result.get('status')}: {said}")
    if last_assistant is not None and last_assistant.rstrip().endswith(("?", "？")):
        lines.append(f"[open question] assistant: {_clip(last_assistant)}")
    return lines


def fold(summary: str, messages: Sequence[dict[str, Any]], max_chars: int) -> str:
    """The summary after folding ``messages`` into it, at most ``max_chars`` long.

    When it must shrink, the oldest goals and results go first; preferences and agreements stay longest.
    An open question only survives while it is the newest line.
    """
    old = [line for line in summary.splitlines() if line.strip() and not line.startswith("[open question]")]
    lines = list(dict.fromkeys([*old, *summary_lines(messages)]))

    def size() -> int:
        return sum(len(line) + 1 for line in lines)

    for kinds in (("goal", "result"), ("open question",), KEPT_KINDS):
        index = 0
        while size() > max_chars and index < len(lines):
            if lines[index].startswith(tuple(f"[{k}]" for k in kinds)):
                del lines[index]
            else:
                index += 1
    return "\n".join(lines)
