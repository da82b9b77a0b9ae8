"""How a run looks in the terminal: a line per change while it runs, a tree when asked, one summary."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.tree import Tree

from tether.interfaces.render import out
from tether.store.runs import RunRecord

MARKS = {
    "pending": ("·", "dim"),
    "running": ("▶", "cyan"),
    "completed": ("✓", "green"),
    "skipped": ("–", "dim"),
    "failed": ("✗", "red"),
    "rejected": ("✗", "red"),
    "cancelled": ("■", "yellow"),
    "waiting_for_human": ("?", "magenta"),
}


def exit_code_of(run: RunRecord) -> int:
    """0 completed · 3 waiting for a person · 1 failed or cancelled · 4 still running."""
    return {"completed": 0, "waiting_for_human": 3, "running": 4}.get(run.status, 1)


def _duration(run: RunRecord, task_id: str) -> float:
    return sum(a.duration_seconds for a in run.attempts_of(task_id))


def _cost(usage: dict[str, Any] | None) -> str:
    """A task's (or run's) model calls, when it made any: "2 model calls · 812 in / 40 out tokens · 1.2 s"."""
    if not usage or not usage.get("model_calls"):
        return ""
    from tether.agent.usage import describe

    return describe(usage)


def tree(run: RunRecord, usage: dict[str, Any] | None = None) -> Tree:
    """The run as a tree; with ``usage`` (``service.run_usage``), each task's model calls and the total."""
    mark, style = MARKS.get(run.status, ("?", ""))
    title = f"[{style}]{mark} run {escape(run.run_id)}: {run.status}[/{style}]"
    if run.goal:
        title += f"  [dim]{escape(run.goal[:120])}[/dim]"
    root = Tree(title)
    planning = _cost((usage or {}).get("planning"))
    if planning:
        root.add(f"[dim]planning · {escape(planning)}[/dim]")
    for state in run.tasks:
        mark, style = MARKS.get(state.status, ("?", ""))
        attempts = f" · {state.attempts} attempt(s)" if state.attempts > 1 else ""
        took = _duration(run, state.task_id)
        took_text = f" · {took:.1f} s" if took else ""
        cost = _cost((usage or {}).get("tasks", {}).get(state.task_id))
        took_text += f" [dim]· {escape(cost)}[/dim]" if cost else ""
        node = root.add(
            f"[{style}]{mark} {escape(state.task_id)}[/{style}] {state.status}{attempts}{took_text}"
        )
        if state.message and state.status != "completed":
            node.add(f"[dim]{escape(state.message[:300])}[/dim]")
        if state.status == "waiting_for_human":
            node.add(f"[magenta]tether flow approve {run.run_id} {state.task_id}[/magenta] · reject · edit")
        evidence = (state.diagnostics or {}).get("evidence")
        if evidence and state.status in ("failed", "waiting_for_human"):
            node.add(f"[dim]evidence: {escape(str(evidence)[:300])}[/dim]")
    if run.message and run.status != "running":
        root.add(f"[dim]{escape(run.message[:300])}[/dim]")
    total = _cost((usage or {}).get("total"))
    if total:
        root.add(f"Σ {escape(total)}")
    return root


def summary(run: RunRecord, usage: dict[str, Any] | None = None) -> str:
    """One paragraph: how the run ended, what waits, what to do, and (with ``usage``) what it cost."""
    text = _summary(run)
    total = _cost((usage or {}).get("total"))
    return f"{text}\n  Σ {total}" if total else text


def _summary(run: RunRecord) -> str:
    counts: dict[str, int] = {}
    for state in run.tasks:
        counts[state.status] = counts.get(state.status, 0) + 1
    parts = ", ".join(f"{n} {status}" for status, n in counts.items())
    text = f"run {run.run_id}: {run.status}" + (f" ({parts})" if parts else "")
    if not run.tasks and run.message:  # it ended before it had tasks (its plan could not be made): why
        text += f": {run.message}"
    if run.status == "waiting_for_human":
        waiting = [t for t in run.tasks if t.status == "waiting_for_human"]
        lines = [text]
        for state in waiting:
            lines.append(f"  {state.task_id}: {state.message}")
            lines.append(f"  answer: tether flow approve|reject|edit {run.run_id} {state.task_id}")
        return "\n".join(lines)
    if run.status in ("failed", "cancelled") and run.message:
        text += f"\n  {run.message}\n  try again: tether flow resume {run.run_id}"
    return text


class LinePrinter:
    """Prints one line per task change (works in a pipe as well as a terminal)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, int]] = {}

    def __call__(self, run: RunRecord) -> Any:
        for state in run.tasks:
            key = (state.status, state.attempts)
            if self._seen.get(state.task_id) == key:
                continue
            first = state.task_id not in self._seen
            self._seen[state.task_id] = key
            if first and state.status == "pending":
                continue
            mark, style = MARKS.get(state.status, ("?", ""))
            extra = f" (attempt {state.attempts})" if state.attempts > 1 and state.status == "running" else ""
            took = _duration(run, state.task_id) if state.status not in ("running", "pending") else 0.0
            took_text = f" {took:.1f} s" if took else ""
            note = f"  {escape(state.message[:200])}" if state.message and state.status != "running" else ""
            out.print(
                f"[{style}]{mark}[/{style}] {escape(state.task_id)} {state.status}{extra}{took_text}{note}",
                highlight=False,
                soft_wrap=True,
            )
