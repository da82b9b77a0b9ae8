"""A conversation turn in the terminal: one line per step as its events arrive (``tether run``,
``tether chat`` and the tour use it), and the icon of each kind of step (``tether trace``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.markup import escape

from tether.interfaces.render import STATUS_STYLE, err, human_duration

if TYPE_CHECKING:
    from tether.events import Event

STEP_ICONS = {
    "model": "🤔",
    "tool": "⚙",
    "confirmation": "❓",
    "budget": "⏳",
    "final": "💬",
    "proactive": "📣",
}
THINKING_SAID_AT_S = (5, 15, 30, 60, 120, 240, 480, 960)  # a line each, not one every few seconds
_thinking_said: dict[tuple[str, int, int], int] = {}


def render_event(event: Event) -> None:
    """The live view of a turn: one line per step."""
    from tether.events import BudgetReviewed, ModelDecided, ModelThinking, ToolFinished

    if isinstance(event, ModelThinking):
        key = (event.thread_id, event.turn, event.index)
        said = _thinking_said.get(key, 0)
        due = sum(1 for at in THINKING_SAID_AT_S if event.elapsed_s >= at)
        if due > said:
            _thinking_said[key] = due
            tokens = f", {event.tokens} tokens so far" if event.tokens else ", no token yet"
            err.print(f"  [dim]… the model is thinking ({human_duration(event.elapsed_s)}{tokens})[/]")
    elif isinstance(event, ModelDecided) and event.tool_calls:
        names = ", ".join(
            f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in event.tool_calls
        )
        err.print(f"  [dim]{STEP_ICONS['model']} decides:[/] {escape(names)}")
    elif isinstance(event, ToolFinished):
        status = str(event.result.get("status", "?"))
        style = STATUS_STYLE.get(status, "yellow")
        message = str(event.result.get("message", "")).strip()
        if message.lower().startswith(status):
            message = message[len(status) :].strip()  # "stopped (asked by …)" after "→ stopped"
        said = escape(message)
        tool = escape(event.tool)
        err.print(f"  [dim]{STEP_ICONS['tool']}[/] {tool} → [{style}]{escape(status)}[/] {said}".rstrip())
    elif isinstance(event, BudgetReviewed):
        err.print(f"  [dim]{STEP_ICONS['budget']} budget: {escape(event.reason)}[/]")
