"""The offline model hands work to other agents when the request names them.

"让研究助手查一下 X，然后让文档助手做成 PPT" / "ask research to look up X, then have docs make a deck":
the request is cut at its connectives; every part that names an agent (its name or one of its aliases,
as the ``agents__delegate`` tool lists them) becomes one ``agents__delegate`` call with that part's own
words, and a later part gets the earlier answers with it (the deck is made from what was found). Only a
request where *every* part names an agent is read this way: anything else is the planner's as before.
The calls run in order, one per decision; after one that did not complete nothing more is handed on,
and the answer is what each agent said.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tether.models.base import Message, ModelResponse, ToolCall, ToolDef
from tether.models.offline_conversation import results_since

DELEGATE = "agents__delegate"
# Where a request turns to its next agent.
_SPLIT = re.compile(
    r"\s*(?:[，,;；。]?\s*(?:然后|接着|之后|再让|再请|再叫|并且让|and then|then)\s*|[;；]\s*)", re.I
)
# Words that hand the work over, around an agent's name ("让…", "请…", "ask … to", "have …").
_LEAD = re.compile(r"^(?:请|让|叫|交给|麻烦|帮我让|ask|have|tell|get|let)\s*(?:the\s+|our\s+)?", re.I)
# A part that works on what came before ("做成 PPT", "写成报告", "make a deck of it") gets the earlier
# answers with it; any other part is handed on in its own words only.
_BUILDS_ON = re.compile(
    r"做成|写成|整理|汇总|总结|基于|根据|用这些|结果|ppt|pptx|deck|slides|report|document|文档|报告|幻灯片|"
    r"\bof (?:it|them|that)\b|\bfrom (?:it|them|that)\b|\binto\b",
    re.I,
)
_TO = re.compile(r"^\s*(?:to\s+|去|来|帮我|帮忙)?", re.I)
MAX_ANSWER_CHARS = 2000


def _agents(tool: ToolDef) -> dict[str, str]:
    """Every word that names an agent (lower-cased) → the agent's name."""
    words: dict[str, str] = {}
    for name, aliases in tool.value_words.get("to", {}).items():
        words[name.lower()] = name
        for alias in aliases:
            words[alias.lower()] = name
    return words


def _part(text: str, words: dict[str, str]) -> tuple[str, str] | None:
    """(agent, what it is asked) when ``text`` hands work to one agent it names."""
    rest = _LEAD.sub("", text.strip(), count=1)
    lowered = rest.lower()
    for word in sorted(words, key=len, reverse=True):
        if lowered.startswith(word):
            asked = _TO.sub("", rest[len(word) :], count=1).strip(" ，,:：")
            return (words[word], asked) if asked else None
    return None


def plan(request: str, tools: Sequence[ToolDef]) -> list[tuple[str, str]] | None:
    """The delegations ``request`` asks for, in order; None when it is not (wholly) one."""
    tool = next((t for t in tools if t.name == DELEGATE), None)
    if tool is None:
        return None
    words = _agents(tool)
    if not words:
        return None
    parts = [p for p in _SPLIT.split(request.strip()) if p and p.strip(" ，,。.")]
    found = [_part(p, words) for p in parts]
    if not found or any(f is None for f in found):
        return None
    return [f for f in found if f is not None]


def respond(
    request: str, messages: Sequence[Message], anchor: int, tools: Sequence[ToolDef], zh: bool
) -> ModelResponse | None:
    """The next delegation of the request, or the answer once every agent has answered; None when the
    request hands nothing to an agent."""
    planned = plan(request, tools)
    if planned is None:
        return None
    done = [(name, result) for name, result in results_since(messages, anchor) if name == DELEGATE]
    if done and not _worked(done[-1][1]) and len(done) < len(planned):
        # An agent that did not finish, or that answered without doing anything (it could not): what
        # it said is not something to build on. Nothing more is handed on.
        return ModelResponse(text=_answer(done, zh, halted=True), model="offline")
    if len(done) < len(planned):
        agent, asked = planned[len(done)]
        earlier = [str(r.get("data", {}).get("answer") or r.get("message", "")) for _, r in done]
        if earlier and _BUILDS_ON.search(asked):
            joined = "\n\n".join(a[:MAX_ANSWER_CHARS] for a in earlier)
            asked = f"{asked}{'：' if zh else ':'}\n{joined}"
        call = ToolCall(id=f"offline_{len(done)}", name=DELEGATE, arguments={"to": agent, "request": asked})
        return ModelResponse(tool_calls=(call,), model="offline")
    return ModelResponse(text=_answer(done, zh), model="offline")


def _worked(result: dict[str, Any]) -> bool:
    data = result.get("data") or {}
    if result.get("status") != "completed":
        return False
    return data.get("resolved_as") not in ("agent", "bundle") or bool(data.get("tools_run"))


def _answer(done: list[tuple[str, dict[str, Any]]], zh: bool, halted: bool = False) -> str:
    lines = []
    for _, result in done:
        data = result.get("data") or {}
        who = data.get("to") or "?"
        said = str(data.get("answer") or result.get("message", "")).strip()
        if result.get("status") == "completed":
            lines.append(f"{who}：{said}" if zh else f"{who}: {said}")
        else:
            lines.append(
                f"{who} 没有完成：{result.get('message', '')}"
                if zh
                else f"{who} did not finish: {result.get('message', '')}"
            )
    if halted:
        lines.append("后面的工作没有再交出去。" if zh else "Nothing further was handed on.")
    return "\n".join(lines)
