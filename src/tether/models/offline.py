"""The offline model: a deterministic planner that maps plain requests onto the tool surface.

The default when no model is configured, so tether runs on a fresh machine with no key and no network.
This module owns the model and one turn's answer: which request the turn answers, a "yes" or a "no"
included (``offline_conversation``), research and documents (``offline_docs``), halting after a call that
failed, the next call of the plan (``offline_choosing``, over the parts ``offline_reading`` read) and the
closing summary in the person's language (``offline_texts``). The rule that matters most, kept by all of
them: it never executes a reading it is unsure of. Every word of the request must be accounted for (a
tool, a value, a count, a connective or a word that carries no request, "帮我…吧", "please"); if any part
is not understood, nothing at all is run: it asks which one, asks "did you mean …?", or says what it
could not do.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tether.models import offline_choosing, offline_docs, offline_memory, offline_team
from tether.models.base import (
    UNABLE,
    BudgetReview,
    Message,
    ModelResponse,
    OpenJob,
    ToolCall,
    ToolDef,
    TurnContext,
)
from tether.models.offline_answers import facts
from tether.models.offline_choosing import Step
from tether.models.offline_conversation import request_of, results_since
from tether.models.offline_reading import MAX_REQUEST_CHARS, state_question
from tether.models.offline_texts import Texts
from tether.models.replies import is_yes
from tether.models.understand import fold, has_cjk, reorder
from tether.models.understand import numbers_in as numbers_in
from tether.models.understand import zh_number as zh_number

OK_STATUSES = ("completed", "running")


class OfflineModel:
    """The offline planner as a ``Model``. ``language`` ("zh" or "en") fixes the language it replies in;
    without it each request's own script decides."""

    name = "offline"
    provider = "offline"  # it reports no usage: it counts no tokens (the trace says "not reported")
    supports_tools = True
    supports_images = False  # a turn with images is answered "I cannot see images" (agent/images.py)

    def __init__(self, language: str | None = None) -> None:
        self.language = language

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], *, context: TurnContext | None = None
    ) -> ModelResponse:
        # Reading a long request is real CPU work: off the event loop, which may be serving a page.
        return await asyncio.to_thread(self.decide, messages, tools, context or TurnContext())

    def decide(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], context: TurnContext
    ) -> ModelResponse:
        """``complete``'s answer, computed on the calling thread."""
        if not tools:
            if context.formats_question is not None:  # the session asks which files a request calls for
                chosen = offline_docs.formats_in_words(context.formats_question)
                return ModelResponse(text=json.dumps({"formats": list(chosen)}), model=self.name)
            return ModelResponse(text=self._review(context.review), model=self.name)
        asked = request_of(messages, context)
        request, anchor = asked.text, asked.anchor
        texts = Texts(self._zh(request))
        if asked.declined:
            return ModelResponse(text=texts.cancelled(), model=self.name)
        if asked.stray or (context.answer is None and is_yes(request)):
            # a yes with no question waiting confirms nothing (and is not a request it cannot do)
            return ModelResponse(text=texts.nothing_pending(), model=self.name)
        if len(request) > MAX_REQUEST_CHARS:  # what it reads is bounded, so its time is too
            return ModelResponse(text=texts.too_long(len(request)), model=self.name)
        noted = offline_memory.noted(request, results_since(messages, anchor), texts.zh)
        if noted is not None:  # the fact it was asked to note: noted (or why not)
            return ModelResponse(text=noted, model=self.name)
        if not results_since(messages, anchor):
            noting = offline_memory.remember_call(request, tools)  # "记住：…", "remember that …"
            if noting is not None:
                return ModelResponse(tool_calls=(noting,), model=self.name)
            remembered = offline_memory.respond(request, context.memories, texts.zh)  # "上次…是什么？"
            if remembered is not None:
                return remembered
        delegated = offline_team.respond(request, messages, anchor, tools, texts.zh)
        if delegated is not None:  # the request hands its parts to agents it names
            return delegated
        researched = offline_docs.respond(request, messages, anchor, tools, context, texts.zh)
        if researched is not None:  # research and documents: planned from the results so far
            return researched
        calls = results_since(messages, anchor)
        kinds = {tool.name: tool.kind for tool in tools}
        if calls and kinds.get(calls[-1][0]) != "control" and calls[-1][1].get("status") not in OK_STATUSES:
            return self._final(calls, texts, halted=True, kinds=kinds)
        steps = self.plan(request, tools, messages, context.open_jobs)
        said = next((step for step in steps if step.say), None)
        if said is not None:  # not sure of every part: nothing runs
            final = self._final(calls, texts, extra=[str(said.say)], kinds=kinds)
            return replace(final, finish_reason=UNABLE) if said.unable else final
        done = len(calls)
        if done < len(steps):
            step = steps[done]
            assert step.tool is not None
            if step.unresolved is not None:
                return self._final(calls, texts, extra=[step.unresolved], kinds=kinds)
            call = ToolCall(id=f"offline_{done}", name=step.tool, arguments=step.args)
            return ModelResponse(tool_calls=(call,), model=self.name)
        answer = self._answer(request, calls, tools, texts)
        if answer is not None:  # a question: its answer from the result, not the result restated
            return ModelResponse(text=answer, model=self.name)
        return self._final(calls, texts, extra=[] if calls else [texts.nothing()], kinds=kinds)

    def _answer(
        self, request: str, calls: list[tuple[str, dict[str, Any]]], tools: Sequence[ToolDef], texts: Texts
    ) -> str | None:
        """What a status result says about the question asked ("刷了几次了" → the counter), when the
        request was a question answered by one business call that completed with data."""
        if len(calls) != 1 or state_question(reorder(fold(request))) is None:
            return None
        name, result = calls[0]
        data = result.get("data")
        kinds = {tool.name: tool.kind for tool in tools}
        if kinds.get(name) != "business" or result.get("status") != "completed" or not data:
            return None
        message = str(result.get("message") or "")
        # (a yes/no field the task's own message already says is not said twice: "running: yes")
        found = [
            f for f in facts(request, data, tools, texts.zh) if texts.zh or f.split(":")[0] not in message
        ]
        if not found and not message:
            return None
        said = texts.facts(found) if found else ""
        if texts.zh or not message:
            return said
        return f"{message[:1].upper()}{message[1:]}. {said}".strip()

    def _zh(self, request: str) -> bool:
        if self.language is not None:
            return self.language == "zh"
        return has_cjk(request)

    def _final(
        self,
        calls: list[tuple[str, dict[str, Any]]],
        texts: Texts,
        *,
        halted: bool = False,
        extra: Sequence[str] = (),
        kinds: Mapping[str, str] | None = None,
    ) -> ModelResponse:
        kinds = kinds or {}
        lines = [
            texts.job(result) if kinds.get(name) == "control" else texts.result(name, result)
            for name, result in calls
        ]
        if halted:
            lines.append(texts.halted())
        lines.extend(extra)
        return ModelResponse(text="\n".join(lines), model=self.name)

    def _review(self, review: BudgetReview | None) -> str:
        """The manager's answer to a budget review: extend while steps still complete."""
        if review is None:
            return json.dumps({"stop": "no review data"})
        if review.completed_steps > 0 and review.failed_steps == 0:
            return json.dumps({"extend": review.extend_by})
        return json.dumps({"stop": "the last steps made no progress"})

    def plan(
        self,
        request: str,
        tools: Sequence[ToolDef],
        messages: Sequence[Message] = (),
        open_jobs: Sequence[OpenJob] | None = None,
    ) -> list[Step]:
        """The calls ``request`` asks for, in order; or one step that says why nothing will run."""
        return offline_choosing.plan(request, tools, messages, open_jobs, Texts(self._zh(request)))


__all__ = ["MAX_REQUEST_CHARS", "OfflineModel", "Step", "Texts", "numbers_in", "zh_number"]
