"""Typed events of a conversation turn, fanned out to subscribers (the CLI's live view, logs, SSE later).

Events describe what was already recorded in the store; a subscriber that raises is logged and skipped,
never allowed to break the turn.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("tether.events")


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    kind: str  # "turn_started", "model", "tool_started", "tool", "confirmation", "budget", "final"
    thread_id: str
    turn: int
    index: int = -1
    payload: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)


Subscriber = Callable[[Event], None]


class EventBus:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def emit(self, event: Event) -> None:
        log.debug("%s %s:%d:%d", event.kind, event.thread_id, event.turn, event.index)
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception("event subscriber %r failed on %s", subscriber, event.kind)
