"""The model's side of a turn: each model call as one step, and the manager's review of the budget.

A model's answer is bounded before anything stores or runs it (arguments over the executor's limit are
refused, an endless text is cut), and a call's failure is a recorded outcome too, so a replayed turn
fails the same way and asks nothing again. When a turn's step budget is spent, the manager (a model,
by default the session's own) reads a review of the turn and may extend the budget, within the ceiling.
A slow model's progress becomes ``ModelThinking`` events on the turn's topic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import tether.telemetry as telemetry
from tether.agent import outputs
from tether.agent.steps import MODEL, Steps, perform
from tether.agent.turn import Turn
from tether.agent.usage import call_record
from tether.errors import ModelError
from tether.events import BudgetReviewed, ModelThinking
from tether.execution.protocol import clip
from tether.models.base import BudgetReview, Message, Model, ModelResponse, ToolCall, TurnContext
from tether.models.jsonfix import loads_lenient
from tether.store.threads import ThreadStore
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.validation import MAX_PARAMS_BYTES

# A model's text answer as stored and shown; longer answers are cut with a note.
MAX_MODEL_TEXT_CHARS = 100_000

MANAGER_PROMPT = (
    "You supervise an agent whose step budget for this turn ran out. Given the review below, answer with "
    'one JSON object: {"extend": <number of extra steps>} if it is making progress and should go on, or '
    '{"stop": "<reason>"} if it should stop and report.'
)


def bounded(response: ModelResponse) -> ModelResponse:
    """A model's answer within the limits before anything stores or runs it: a call whose arguments are
    larger than the executor accepts is answered with that refusal and recorded without them, and an
    endless text is cut (saying so)."""
    calls = []
    for call in response.tool_calls:
        try:
            size = len(json.dumps(call.arguments, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        except (TypeError, ValueError, RecursionError):
            size = MAX_PARAMS_BYTES + 1
        if size > MAX_PARAMS_BYTES:
            why = f"arguments of {size} bytes are over the limit of {MAX_PARAMS_BYTES}; nothing ran"
            call = ToolCall(id=call.id, name=clip(call.name, 80), arguments={}, error=why)
        calls.append(call)
    text = clip(response.text, MAX_MODEL_TEXT_CHARS)
    if text == response.text and all(a is b for a, b in zip(calls, response.tool_calls, strict=True)):
        return response
    return dataclasses.replace(response, text=text, tool_calls=tuple(calls))


async def complete(
    steps: Steps, model: Model, messages: list[Message], tools: Any, context: TurnContext
) -> tuple[ModelResponse, dict[str, Any]]:
    """One model call as one step (its failure too: a replay fails the same way, asks nothing); the
    answer and the call's record (``agent/usage.py``: model, tokens, duration), measured inside the
    step so that a replay returns the same record and nothing is counted twice."""

    async def work() -> dict[str, Any]:
        # (the span lives inside the step: a replayed step is not traced again)
        with telemetry.span(f"chat {model.name}", _asked(model)) as traced:
            started = time.monotonic()
            try:
                response = bounded(await model.complete(messages, tools, context=context))
            except ModelError as exc:
                traced.set_attribute("error.type", exc.code)
                traced.error(exc.message)
                return {"error": {"code": exc.code, "message": exc.message, "data": exc.data}}
            call = call_record(model, response, time.monotonic() - started)
            traced.set_attributes(_answered(call))
        return {"response": response.to_dict(), "call": call}

    out = await perform(steps, MODEL, work)
    if "error" in out:
        raise ModelError(str(out["error"].get("message")), **(out["error"].get("data") or {}))
    response = ModelResponse.from_dict(out["response"])
    # (a step recorded before calls were measured has none: its record says so, with no numbers)
    call = out.get("call") or {**call_record(model, response, 0.0), "duration_s": None}
    return response, call


def _asked(model: Model) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": str(getattr(model, "provider", "") or "") or None,
        "gen_ai.request.model": model.name,
    }


def _answered(call: dict[str, Any]) -> dict[str, Any]:
    """A model call's record (``agent/usage.py``) as the GenAI conventions name it (tokens only when the
    service reported them)."""
    return {
        "gen_ai.response.model": call.get("model") or None,
        "gen_ai.usage.input_tokens": call.get("input_tokens"),
        "gen_ai.usage.output_tokens": call.get("output_tokens"),
        "gen_ai.response.finish_reasons": (call["finish_reason"],) if call.get("finish_reason") else None,
    }


async def review(
    steps: Steps,
    manager: Model,
    turn: Turn,
    *,
    language: str,
    used: int,
    completed: int,
    failed: int,
    limit: int,
) -> int:
    """The manager's review of a turn whose budget (``limit`` steps) is spent: how many more steps it
    may take (0: stop), within the turn's ceiling. The review is on record either way."""
    ceiling, extend_by = int(turn.limits["ceiling"]), int(turn.limits["extend_by"])
    room = ceiling - limit
    budget = BudgetReview(
        steps_used=used,
        completed_steps=completed,
        failed_steps=failed,
        extend_by=min(extend_by, max(room, 0)),
        ceiling=ceiling,
    )
    extra = 0
    reason = "the hard ceiling of steps is reached"
    asked: list[dict[str, Any]] = []
    if room > 0:
        answer, call = await complete(
            steps,
            manager,
            [
                {"role": "system", "content": MANAGER_PROMPT},
                {"role": "user", "content": json.dumps(budget.to_dict())},
            ],
            (),
            TurnContext(review=budget, language=language),
        )
        asked.append(call)
        decision = loads_lenient(answer.text) or {}
        try:
            extra = max(0, min(int(decision.get("extend", 0)), extend_by, room))
        except (TypeError, ValueError, OverflowError):
            extra = 0
        reason = str(decision.get("stop") or ("extended" if extra else "the manager gave no extension"))
    await turn.record(
        "budget",
        args=budget.to_dict(),
        result={"extend": extra, **({"model_calls": asked} if asked else {})},
        text=reason,
        event=BudgetReviewed(
            topic=turn.topic, thread_id=turn.thread_id, turn=turn.turn, index=len(turn.steps),
            review=budget.to_dict(), extend=extra, reason=reason,
        ),
    )  # fmt: skip
    return extra


def thinking(threads: ThreadStore, turn: Turn) -> Callable[[float, int], Awaitable[None]]:
    """What a slow model's progress becomes: a ``ModelThinking`` event on the turn's topic (on
    record, so the page and a following ``tether run`` see the model work, not a frozen turn)."""
    index = len(turn.steps)

    async def tell(elapsed: float, tokens: int) -> None:
        event = ModelThinking(
            topic=turn.topic, thread_id=turn.thread_id, turn=turn.turn, index=index,
            elapsed_s=elapsed, tokens=tokens,
        )  # fmt: skip
        turn.emit(await asyncio.to_thread(threads.emit, event))

    return tell


async def settle_formats(
    steps: Steps, model: Model, turn: Turn, call: ToolCall, language: str
) -> tuple[ToolCall, TaskResult | None]:
    """The formats a generate call runs with (``agent/outputs.py``): the person's ticked ones, else the
    model's, else one follow-up decision; (call, None) to run it, or (call, result) when no file is
    wanted. The follow-up is no step of the turn's record: its cost goes on the final step."""
    if turn.formats:
        return dataclasses.replace(call, arguments=outputs.with_formats(call.arguments, turn.formats)), None
    if outputs.named(call.arguments):
        return call, None
    answer, asked = await complete(
        steps,
        model,
        outputs.follow_up(turn.message),
        (),
        TurnContext(formats_question=turn.message, language=language),
    )
    turn.side_calls.append(asked)
    chosen = outputs.answer_formats(answer.text)
    if chosen:
        return dataclasses.replace(call, arguments=outputs.with_formats(call.arguments, chosen)), None
    declined = TaskResult(
        task_id=outputs.GENERATE_TASK,
        execution_id="",
        status=TaskStatus.COMPLETED,
        message="no file generated: the request names no format (md, html, pptx or pdf)",
        data={"formats": []},
    )
    return call, declined
