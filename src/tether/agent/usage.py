"""What a turn's model calls cost: tokens and time, on record with the steps that made them.

Every model call of a turn is measured where it runs, inside its step (``decisions.complete``): which
model and provider answered, the input and output tokens the service reported, how long it took and why
it stopped. The measurement is part of the step's output, so a durable step replayed after a crash
returns the record it returned the first time (nothing is measured, or recorded, twice), and it lands in
the thread store with the step whatever telemetry exporter is set (none, console or OTLP):

- a ``model`` step's ``result`` is ``{"model_calls": [call]}``;
- a ``budget`` step's ``result`` carries the manager's call, when it was asked;
- the ``final`` step carries the calls that were no step of their own (the question of which file
  formats a request wants).

A service that reports no usage (the offline model, some local servers) has its tokens recorded as
``None`` and shown as "not reported": tether does not estimate them, so a number shown is always the
service's own. Totals (``Totals``) add what was reported and count the calls that reported nothing, so a
sum is never mistaken for the whole when part of it is missing. A turn's totals include the turns it
delegated to other agents (their threads hang under its steps), as they were spent for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.models.base import ModelResponse
from tether.store.threads import StepRecord, ThreadStore

MAX_DEPTH = 8  # delegations nested deeper than this are not followed (as the trace shows them)


def call_record(model: Any, response: ModelResponse, duration_s: float) -> dict[str, Any]:
    """One model call as it is kept: JSON-ready, ``None`` tokens when the service reported none."""
    usage = response.usage
    return {
        "model": response.model or str(getattr(model, "name", "") or ""),
        "provider": str(getattr(model, "provider", "") or ""),
        "input_tokens": usage.prompt_tokens if usage.reported else None,
        "output_tokens": usage.completion_tokens if usage.reported else None,
        "duration_s": round(duration_s, 6),
        "finish_reason": response.finish_reason,
    }


def calls_of(step: StepRecord | dict[str, Any]) -> list[dict[str, Any]]:
    """The model calls a recorded step made (none for a tool's step)."""
    result = step.get("result") if isinstance(step, dict) else step.result
    found = result.get("model_calls") if isinstance(result, dict) else None
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(slots=True)
class Totals:
    """The sum of some model calls: tokens of those that reported them, time of all."""

    calls: int = 0
    reported: int = 0  # calls whose service reported their tokens
    input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0

    def add_call(self, call: dict[str, Any]) -> None:
        self.calls += 1
        duration = call.get("duration_s")
        if isinstance(duration, int | float) and duration >= 0:
            self.duration_s += float(duration)
        tokens_in, tokens_out = _int(call.get("input_tokens")), _int(call.get("output_tokens"))
        if tokens_in is not None or tokens_out is not None:
            self.reported += 1
            self.input_tokens += tokens_in or 0
            self.output_tokens += tokens_out or 0

    def add(self, other: Totals) -> None:
        self.calls += other.calls
        self.reported += other.reported
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.duration_s += other.duration_s

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` and API shape: tokens are ``None`` when no call reported any."""
        known = self.reported > 0
        return {
            "model_calls": self.calls,
            "reported_calls": self.reported,
            "input_tokens": self.input_tokens if known else None,
            "output_tokens": self.output_tokens if known else None,
            "duration_s": round(self.duration_s, 3),
        }


def totals_of(calls: Iterable[dict[str, Any]]) -> Totals:
    totals = Totals()
    for call in calls:
        totals.add_call(call)
    return totals


def describe(totals: Totals | dict[str, Any], *, zh: bool = False) -> str:
    """One line for a person: "2 model calls · 1,234 in / 56 out tokens · 3.4 s" ("not reported" when
    the service said nothing; "1 of 2 reported" when part of it is missing)."""
    t = totals.to_dict() if isinstance(totals, Totals) else totals
    calls, reported = int(t.get("model_calls") or 0), int(t.get("reported_calls") or 0)
    seconds = f"{float(t.get('duration_s') or 0):.1f} s"
    if zh:
        head = f"{calls} 次模型调用"
        if not reported:
            tokens = "用量未报告"
        else:
            tokens = f"输入 {t['input_tokens']:,} / 输出 {t['output_tokens']:,} 词元"
            if reported < calls:
                tokens += f"（{calls} 次中 {reported} 次报告了用量）"
        return f"{head} · {tokens} · {seconds}"
    head = f"{calls} model call{'s' if calls != 1 else ''}"
    if not reported:
        tokens = "tokens not reported"
    else:
        tokens = f"{t['input_tokens']:,} in / {t['output_tokens']:,} out tokens"
        if reported < calls:
            tokens += f" ({reported} of {calls} reported)"
    return f"{head} · {tokens} · {seconds}"


def describe_call(call: dict[str, Any], *, zh: bool = False) -> str:
    """One model call for a person: "offline · tokens not reported · 0.0 s"."""
    who = call.get("model") or "?"
    seconds = f"{float(call.get('duration_s') or 0):.1f} s"
    tokens_in, tokens_out = _int(call.get("input_tokens")), _int(call.get("output_tokens"))
    if tokens_in is None and tokens_out is None:
        tokens = "用量未报告" if zh else "tokens not reported"
    elif zh:
        tokens = f"输入 {tokens_in or 0:,} / 输出 {tokens_out or 0:,} 词元"
    else:
        tokens = f"{tokens_in or 0:,} in / {tokens_out or 0:,} out tokens"
    return f"{who} · {tokens} · {seconds}"


def _child_thread(step: StepRecord, thread_id: str) -> str | None:
    if step.kind != "tool" or not isinstance(step.result, dict):
        return None
    data = step.result.get("data")
    child = data.get("thread_id") if isinstance(data, dict) else None
    return child if isinstance(child, str) and child != thread_id else None


def turn_totals(
    threads: ThreadStore, thread_id: str, *, steps: Sequence[StepRecord] | None = None, depth: int = 0
) -> dict[int, Totals]:
    """Each turn of a thread: its own model calls and those of the turns it delegated. ``steps``: the
    thread's steps already read (all, or one turn's: then only that turn is counted), not read again."""
    found: dict[int, Totals] = {}
    for step in threads.steps(thread_id) if steps is None else steps:
        totals = found.setdefault(step.turn, Totals())
        for call in calls_of(step):
            totals.add_call(call)
        child = _child_thread(step, thread_id)
        if child is not None and depth + 1 < MAX_DEPTH:
            for sub in turn_totals(threads, child, depth=depth + 1).values():
                totals.add(sub)
    return found


def threads_totals(threads: ThreadStore, thread_ids: Sequence[str]) -> Totals:
    """The model calls of every turn of these threads (a run's agent tasks), delegations included."""
    totals = Totals()
    for thread_id in thread_ids:
        for turn in turn_totals(threads, thread_id).values():
            totals.add(turn)
    return totals
