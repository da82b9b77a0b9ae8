"""How a turn performs its steps: directly, or each as a durable step that a crash does not repeat.

A turn has three kinds of step whose outcome must not change when the turn is replayed: ``open`` (the
turn's number and the call the person answered), ``model`` (one model response) and ``tool`` (one tool
execution or control call). ``ConversationSession`` hands each one to its ``Steps`` (through
``perform``) as a coroutine function returning a JSON-ready dict. ``direct`` just runs it; the
supervisor's durable steps (``supervisor/turns.py``) make each a DBOS step, so a turn interrupted by a
crash is replayed from the record: finished steps return what they returned, and the turn goes on from
the first that did not finish. Everything a turn writes between steps is keyed by (thread, turn,
index), so a replay writes nothing twice.

A step may answer ``{"halt": reason}`` instead of running: the turn stops there (its deadline passed,
or another process recovered the turn meanwhile); a replay that finds its turn already ended answers with
the turn as its record has it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

StepWork = Callable[[], Awaitable[dict[str, Any]]]

OPEN = "open"
MODEL = "model"
TOOL = "tool"
# A delegation (``agent/team.py``): not one step but a child turn with steps of its own; ``delegate``
# runs it (directly, or as a DBOS child workflow whose id derives from the delegator's step).
DELEGATE = "delegate"


class Steps(Protocol):
    durable: bool  # a durable turn that is cancelled is resumed later, not recorded as failed

    async def __call__(self, kind: str, work: StepWork) -> dict[str, Any]: ...

    async def delegate(self, payload: dict[str, Any], team: Any) -> dict[str, Any]: ...


class DirectSteps:
    """Run each step at once (a turn in a short-lived process: a crash is settled by the next turn)."""

    durable = False

    async def __call__(self, kind: str, work: StepWork) -> dict[str, Any]:
        return await work()

    async def delegate(self, payload: dict[str, Any], team: Any) -> dict[str, Any]:
        return await team.runner(team, payload, self)


DIRECT = DirectSteps()


class TurnHalted(Exception):
    """A step said ``halt``: the turn stops where it is."""

    def __init__(
        self, reason: str, *, taken_over: bool = False, ended: bool = False, number: int | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.taken_over = taken_over  # another process owns the turn now: leave its record alone
        self.ended = ended  # the turn had ended before this replay reached it: its record is the answer
        self.number = number


async def perform(steps: Steps, kind: str, work: StepWork) -> dict[str, Any]:
    """Run ``work`` as one step of ``kind``; a step that answers ``halt`` raises ``TurnHalted``."""
    out = await steps(kind, work)
    if "halt" in out:
        raise TurnHalted(
            str(out["halt"]),
            taken_over=bool(out.get("taken_over")),
            ended=bool(out.get("ended")),
            number=out.get("number"),
        )
    return out
