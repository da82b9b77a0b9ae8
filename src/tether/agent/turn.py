"""The bookkeeping of one conversation turn: steps, the messages they add, and their events.

Every step is recorded in one place (``Turn.record``): the step row, the message it adds to the
conversation and its typed event go to the store in one transaction, then to the in-process bus.
A message is keyed by the step that produced it (the person's message is 0, step ``i`` adds message
``i + 1``), so replaying a step never stores its message twice. A tool step is recorded ``started``,
with the execution id it is about to use, before anything runs.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Any

from tether.events import Event, EventBus, TurnFinished, TurnStarted
from tether.models.base import Message, RecalledMemory
from tether.store.threads import REPLAYED, StepRecord, ThreadState, ThreadStore


class TurnStatus(enum.StrEnum):
    COMPLETED = "completed"
    NEEDS_CONFIRMATION = "needs_confirmation"
    BUDGET_EXHAUSTED = "budget_exhausted"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # its process died; the next turn on the thread recovers it


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnResult:
    thread_id: str
    turn: int
    status: TurnStatus
    final: str
    steps: tuple[StepRecord, ...]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnResult:
        """Read back ``to_dict`` (a turn run by another process)."""
        thread_id, turn = str(data["thread_id"]), int(data["turn"])
        steps = tuple(
            StepRecord(
                thread_id=thread_id, turn=turn, index=int(s["index"]), kind=str(s["kind"]),
                tool=s.get("tool"), args=s.get("args"), result=s.get("result"), text=str(s.get("text") or ""),
            )
            for s in data.get("steps", ())
        )  # fmt: skip
        return cls(
            thread_id=thread_id, turn=turn, status=TurnStatus(data["status"]), final=str(data["final"]),
            steps=steps,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "turn": self.turn,
            "status": self.status.value,
            "final": self.final,
            "steps": [
                {
                    "index": s.index,
                    "kind": s.kind,
                    "tool": s.tool,
                    "args": s.args,
                    "result": s.result,
                    "text": s.text,
                }
                for s in self.steps
            ],
        }


def topic(thread_id: str) -> str:
    return f"thread:{thread_id}"


class Turn:
    def __init__(
        self, threads: ThreadStore, bus: EventBus, state: ThreadState, number: int, message: str
    ) -> None:
        self.threads = threads
        self.bus = bus
        self.state = state
        self.turn = number
        self.message = message
        self.steps: list[StepRecord] = []
        self.topic = topic(state.thread_id)
        self.stray_answer = False  # a yes/no with no question waiting
        self.formats: tuple[str, ...] = ()  # the files the person ticked for this turn
        self.limits: dict[str, int] = {}  # the step budget, fixed when the turn opened
        self.images: list[dict[str, Any]] = []  # references of the images sent with the message
        self.recalled: tuple[RecalledMemory, ...] = ()  # what earlier threads said about the request
        # Model calls that are no step of their own (which formats a request wants): on the final step.
        self.side_calls: list[dict[str, Any]] = []

    @property
    def thread_id(self) -> str:
        return self.state.thread_id

    async def started(self) -> None:
        user: dict[str, Any] = {"role": "user", "content": self.message}
        if self.images:
            user["images"] = self.images
        if not await asyncio.to_thread(self.threads.append, self.thread_id, self.turn, 0, user):
            return  # a replayed turn: it started already
        event = TurnStarted(
            topic=self.topic,
            thread_id=self.thread_id,
            turn=self.turn,
            message=self.message,
            agent=self.state.agent or "assistant",
        )
        self.emit(await asyncio.to_thread(self.threads.emit, event))

    async def record(
        self,
        kind: str,
        *,
        event: Event | None = None,
        message: Message | None = None,
        index: int | None = None,
        **fields: Any,
    ) -> StepRecord:
        """Record a new step (or, with ``index``, the outcome of one recorded as started)."""
        if index is None:
            step = StepRecord(
                thread_id=self.thread_id, turn=self.turn, index=len(self.steps), kind=kind, **fields
            )
            self.steps.append(step)
        else:
            step = StepRecord(thread_id=self.thread_id, turn=self.turn, index=index, kind=kind, **fields)
            self.steps[index] = step
        # Off the event loop: a busy store must not stall anything else this process does.
        event_id = await asyncio.to_thread(self.threads.record_step, step, event, message)
        if event is not None and event_id != REPLAYED:
            self.emit(event.model_copy(update={"id": event_id}) if event_id else event)
        return step

    def emit(self, event: Event) -> None:
        """Tell the live listeners of this process (the event is on record already)."""
        self.bus.emit(event)

    async def done(self, status: TurnStatus, final: str) -> TurnResult:
        index = len(self.steps)
        await self.record(
            "final", text=final, result={"model_calls": self.side_calls} if self.side_calls else None
        )
        event = TurnFinished(
            topic=self.topic,
            thread_id=self.thread_id,
            turn=self.turn,
            index=index,
            status=status.value,
            final=final,
        )
        if await asyncio.to_thread(
            self.threads.end_turn, self.thread_id, self.turn, status.value, final, event
        ):
            self.emit(event)
        return TurnResult(
            thread_id=self.thread_id, turn=self.turn, status=status, final=final, steps=tuple(self.steps)
        )


def worth_remembering(result: TurnResult) -> bool:
    """Whether a conversation's memory keeps this ended turn: a completed one, and one that failed with
    nothing run — what the person said counts even when no tool could act on it ("note that my manager
    is Priya"). A turn whose tools failed is not: a goal's retry would recall its own failed attempt."""
    if result.status is TurnStatus.COMPLETED:
        return True
    return result.status is TurnStatus.FAILED and not any(s.kind == "tool" for s in result.steps)
