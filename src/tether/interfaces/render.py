"""Rendering results and progress for people (Rich), shared by the CLI commands and the tour."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from rich.console import Console
from rich.markup import escape

from tether.tasks.result import TaskResult, TaskStatus

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

STATUS_STYLE = {
    TaskStatus.COMPLETED: "green",
    TaskStatus.RUNNING: "cyan",
    TaskStatus.PENDING: "cyan",
    TaskStatus.FAILED: "red",
    TaskStatus.STOPPED: "yellow",
    TaskStatus.REJECTED: "magenta",
    TaskStatus.NOT_FOUND: "magenta",
}


# Shown by --json, left out of the human view to keep it readable.
HIDDEN = frozenset(
    {"errors", "log_tail", "created_at", "updated_at", "ended_at", "detached", "caller", "origin", "digest"}
)


def print_result(result: TaskResult, console: Console = out) -> None:
    style = STATUS_STYLE.get(result.status, "white")
    task, execution = escape(result.task_id), escape(result.execution_id)
    console.print(f"[bold {style}]{result.status.value}[/]  {task}  [dim]{execution}[/]")
    if result.message:
        console.print(f"  {escape(result.message)}")
    shown = {k: v for k, v in result.data.items() if k not in HIDDEN and v is not None}
    for key, value in shown.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        console.print(f"  [dim]{escape(key)}:[/] {escape(text)}")
    if result.data.get("log_tail"):
        console.print("  [dim]log tail:[/]")
        for line in str(result.data["log_tail"]).splitlines():
            console.print(f"    [dim]{escape(line)}[/]")
    if result.duration_seconds:
        console.print(f"  [dim]{result.duration_seconds:.2f}s[/]")


async def show_progress(executor: Any, execution_id: str) -> None:
    """Draw a live progress bar from the execution's events.jsonl until cancelled."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    paths = executor.jobs.paths(execution_id)
    from tether.execution.protocol import last_progress

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        handle = bar.add_task("starting", total=1.0)
        while True:
            event = last_progress(paths)
            if event is not None:
                fraction = event.get("fraction")
                bar.update(
                    handle,
                    completed=fraction if fraction is not None else 0.0,
                    total=1.0 if fraction is not None else None,
                    description=str(event.get("message") or "working"),
                )
            await asyncio.sleep(0.1)
