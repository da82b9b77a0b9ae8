"""What the conversation so far tells the offline model, beyond the request's own words.

It owns reading the message history: which request a turn answers (the person's last words; the request
a "yes" confirmed; the one a "no" declined, whose language the reply keeps; earlier requests completed
by an answer to "which one?"), the calls already made for it and their results, and the newest job still
open. How a request is read is ``offline_reading``'s; what is said about it is ``offline_texts``'.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.models.base import Message, OpenJob, TurnContext
from tether.models.replies import is_no, is_yes


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """The request a turn answers, and where it sits in the conversation."""

    text: str
    anchor: int  # the index of the user message it came from; -1 when there is none
    declined: bool = False  # the person said no to the call it led to: nothing runs
    stray: bool = False  # a yes or a no arrived with nothing waiting for it


def request_of(messages: Sequence[Message], context: TurnContext) -> Request:
    """The request this turn answers."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    anchor = users[-1] if users else -1
    request = _content(messages, anchor) if anchor >= 0 else ""
    if context.answer is False:
        # Said in the language of the request that led to the question, not of "no" (nor of a yes
        # given to an earlier call of it).
        position = len(users) - 2
        while position > 0 and _answered(messages, users, position):
            position -= 1
        asked = _content(messages, users[position]) if len(users) >= 2 else request
        return Request(text=asked, anchor=anchor, declined=True)
    if context.answer is True and len(users) >= 2:
        # The person confirmed a call: carry on with the request that led to it — past the yes that
        # confirmed an earlier call of the same request ("A, then B": yes to A, then yes to B).
        position = len(users) - 2
        while position > 0 and _answered(messages, users, position):
            position -= 1
        return Request(text=_content(messages, users[position]), anchor=users[position])
    if context.stray_answer:
        return Request(text=request, anchor=anchor, stray=True)
    return Request(text=_with_clarifications(messages, users, request), anchor=anchor)


def results_since(messages: Sequence[Message], anchor: int) -> list[tuple[str, dict[str, Any]]]:
    """(tool name, result) of each call made after the message at ``anchor``, in order; a call that
    waits for the person's confirmation has not been made."""
    after = [m for m in messages[anchor + 1 :] if m.get("role") != "user"]
    calls: list[tuple[str, dict[str, Any]]] = []
    pending: dict[str, str] = {}
    for message in after:
        for call in message.get("tool_calls") or []:
            pending[call["id"]] = call["function"]["name"]
        if message.get("role") == "tool":
            name = pending.get(str(message.get("tool_call_id")), "tool")
            result = _result(message.get("content"))
            if result.get("status") != "needs_confirmation":
                calls.append((name, result))
    return calls


def _answered(messages: Sequence[Message], users: list[int], position: int) -> bool:
    """Whether the user message ``users[position]`` was a yes or no to a call waiting for it."""
    text = _content(messages, users[position])
    if not (is_yes(text) or is_no(text)):
        return False
    before = messages[users[position - 1] + 1 : users[position]]
    return any(
        m.get("role") == "tool" and _result(m.get("content")).get("status") == "needs_confirmation"
        for m in before
    )


def _content(messages: Sequence[Message], index: int) -> str:
    return str(messages[index].get("content") or "")


def _with_clarifications(messages: Sequence[Message], users: list[int], request: str) -> str:
    """The request with the earlier ones it answers: when the last reply was a question (and ran
    nothing), the person's new words complete the request that led to it ("刷副本" … "金币")."""
    combined = request
    position = len(users) - 1
    while position > 0 and len(users) - position <= 3:
        between = messages[users[position - 1] + 1 : users[position]]
        if any(m.get("role") == "tool" for m in between) or not between:
            break
        reply = str(between[-1].get("content") or "").strip()
        if between[-1].get("role") != "assistant" or not reply.endswith(("？", "?", "。", ".")):
            break
        # Only an answer to "which one?" (``Texts.which``) completes the request that led to it.
        if not any(mark in reply for mark in ("选哪一个", "Which ", "Allowed:", "可选")):
            break
        combined = f"{messages[users[position - 1]].get('content') or ''}，{combined}"
        position -= 1
    return combined


def _result(content: object) -> dict[str, Any]:
    """A tool message's result; one that is not a JSON object reads as a failure that says it."""
    try:
        value = json.loads(str(content))
    except ValueError:
        return {"status": "failed", "message": str(content)}
    return value if isinstance(value, dict) else {"status": "failed", "message": str(value)}


def latest_job(messages: Sequence[Message], open_jobs: Sequence[OpenJob] | None) -> str | None:
    """The newest open job: from the loop's list of open jobs when it gave one (it is fresh), else the
    newest background job the conversation started and did not see end."""
    if open_jobs is not None:
        return open_jobs[0].execution_id if open_jobs else None
    ended: set[str] = set()
    for message in reversed(messages):
        if message.get("role") != "tool":
            continue
        result = _result(message.get("content"))
        eid = str(result.get("execution_id") or "")
        if result.get("status") in ("completed", "failed", "stopped"):
            ended.add(eid)
        elif result.get("status") == "running" and eid not in ended:
            return eid
    return None
