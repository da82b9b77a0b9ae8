"""The offline model answers "what did we say last time" from the memories a turn recalled.

A question about an earlier conversation ("上次我们说的那个副本叫什么？", "what did I say my manager's
name was?") is answered with the best recalled memory, cited by its thread and date: the person's words
and the answer then, as they were said (the offline model does not paraphrase). With nothing recalled,
it says it found no earlier conversation about that and runs nothing: it never makes one up. Any other
request is the planner's, whatever was recalled.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tether.models.base import ModelResponse, RecalledMemory, ToolCall, ToolDef

# Words that point at an earlier conversation, and words that make a sentence a question: both are
# needed ("刷副本之前先启动游戏" is a request, not a question about the past).
_BEFORE = re.compile(
    r"上次|上回|之前|以前|前几天|那天|还记得|记不记得|记得吗|我说过|我提过|我告诉过|跟你说过|我们聊|我们说|我们谈|"
    r"提到过|说过的|聊过的|"
    r"\blast time\b|\bearlier\b|\bremember\b|\brecall\b|\bdid i (?:say|tell|mention|ask)\b|"
    r"\bwhat did (?:i|we)\b|\bwe (?:talked|discussed|said|spoke)\b|\bi (?:told|mentioned|said)\b|"
    r"\bprevious(?:ly)?\b",
    re.I,
)
_QUESTION = re.compile(
    r"[?？]|什么|哪|吗|多少|几|谁|怎么|\b(?:what|which|when|where|who|how|did|do you)\b", re.I
)
# "记住：我的经理叫王芳" / "remember that I prefer PDF": a fact to note, when the agent may note facts.
_REMEMBER = re.compile(
    r"^\s*(?:请|麻烦)?(?:帮我)?(?:记住|记一下|记下来|记下|别忘了|要记得)(?:一下)?[：:，,。\s]*(?P<zh>.+)$|"
    r"^\s*(?:please\s+)?(?:remember|note|keep in mind|don't forget)(?:\s+that)?[:,\s]+(?P<en>.+)$",
    re.I | re.S,
)
REMEMBER_TOOL = "memory__remember"
MAX_QUOTE_CHARS = 300


def asks_about_before(request: str) -> bool:
    return bool(_BEFORE.search(request) and _QUESTION.search(request))


def remember_call(request: str, tools: Sequence[ToolDef]) -> ToolCall | None:
    """The ``memory.remember`` call a request to note something asks for (None when it asks for none,
    or when this agent may not note facts: the tool is not on its surface)."""
    if not any(tool.name == REMEMBER_TOOL for tool in tools):
        return None
    found = _REMEMBER.match(request)
    if found is None:
        return None
    fact = " ".join((found.group("zh") or found.group("en") or "").split()).rstrip("。.")
    if not fact:
        return None
    return ToolCall(id="offline_remember", name=REMEMBER_TOOL, arguments={"fact": fact[:500]})


def noted(request: str, calls: Sequence[tuple[str, dict[str, Any]]], zh: bool) -> str | None:
    """The answer once the fact a request asked to note was handed to ``memory.remember``."""
    if not calls or calls[-1][0] != REMEMBER_TOOL or _REMEMBER.match(request) is None:
        return None
    result = calls[-1][1]
    if result.get("status") == "completed":
        fact = str(result.get("message", "")).removeprefix("noted: ")
        return f"好的，记下了：{fact}" if zh else f"Noted: {fact}"
    why = str(result.get("message", ""))
    return f"没有记下：{why}" if zh else f"Not noted: {why}"


def respond(request: str, memories: tuple[RecalledMemory, ...], zh: bool) -> ModelResponse | None:
    """The answer to a question about an earlier conversation; None for any other request."""
    if not asks_about_before(request):
        return None
    if not memories:
        text = (
            "我没有找到之前谈到这件事的对话（也没有记下相关的事）。能再说一下吗？"
            if zh
            else "I found no earlier conversation about that (and nothing I noted). Could you tell me again?"
        )
        return ModelResponse(text=text, model="offline")
    best = memories[0]
    return ModelResponse(text=cite(best, zh), model="offline")


def cite(memory: RecalledMemory, zh: bool) -> str:
    day = memory.said_at[:10]
    if memory.kind == "fact":
        return f"我记下过（{day}）：{memory.text}" if zh else f"I noted on {day}: {memory.text}"
    said, _, answered = memory.text.partition("\n→ ")
    said, answered = _clip(said), _clip(answered)
    where = memory.thread_id or "?"
    if zh:
        reply = f"，我回答：「{answered}」" if answered else ""
        return f"在 {day} 的对话里（线程 {where}），你说：「{said}」{reply}"
    reply = f", and I answered: “{answered}”" if answered else ""
    return f"In our conversation on {day} (thread {where}) you said: “{said}”{reply}"


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_QUOTE_CHARS else text[: MAX_QUOTE_CHARS - 1] + "…"
