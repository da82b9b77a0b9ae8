"""Rendering results and progress for people (Rich), shared by the CLI commands and the tour."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.segment import Segment

if TYPE_CHECKING:
    from tether.tasks.result import TaskResult

# What text from outside (a task's output, a file, a model, a log) may not send to a terminal: C0 controls
# but tab and newline, DEL, C1 controls (8-bit CSI and OSC among them) and the bidirectional overrides
# and isolates that reorder the text around them.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the Unicode control pictures: ␛ ␇ ␍ …
    if code == 0x7F:
        return "␡"
    return f"<U+{code:04X}>"


def visible(text: str) -> str:
    """``text`` with every control character it carries shown, not acted on by the terminal."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(_picture, text.replace("\r\n", "\n"))


class _SafeConsole(Console):
    """A Rich console that shows the control characters of what it prints instead of sending them:
    strings are cleaned before layout (so widths stay right), and every segment of text once more
    before it is written (Text objects built elsewhere). Rich's own control segments (cursor moves
    of a progress bar) and styles pass untouched."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(visible(text), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control or not segment.text else segment._replace(text=visible(segment.text))
            for segment in buffer
        )


class _Console:
    """A console made when first used in this process: a command forked from the CLI server gets one
    that sees its own terminal, not the server's."""

    def __init__(self, *, stderr: bool) -> None:
        self._stderr = stderr
        self._made: tuple[int, Console] | None = None

    def _console(self) -> Console:
        if self._made is None or self._made[0] != os.getpid():
            self._made = (os.getpid(), _SafeConsole(stderr=self._stderr, highlight=False))
        return self._made[1]

    def reset(self) -> None:
        self._made = None

    def real(self) -> Console:
        """The rich ``Console`` itself (for APIs that want one, such as ``Progress``)."""
        return self._console()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._console(), name)


out: Any = _Console(stderr=False)
err: Any = _Console(stderr=True)


def print_error(message: str, *, as_json: bool, code: str = "usage") -> None:
    """The one line (or the one JSON document) that every failure of a command ends with."""
    if as_json:
        print(json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False))
    else:
        err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


def reset() -> None:
    """Forget the consoles (the process's streams or environment changed)."""
    out.reset()
    err.reset()


# By TaskStatus value (a StrEnum looks its members up here too): the CLI's help needs no pydantic.
STATUS_STYLE = {
    "completed": "green",
    "running": "cyan",
    "pending": "cyan",
    "failed": "red",
    "stopped": "yellow",
    "rejected": "magenta",
    "not_found": "magenta",
}


def human_duration(seconds: float | None) -> str:
    """0.42 s, 12.3 s, 2 min 5 s, 1 h 4 min: what a person reads at a glance."""
    if seconds is None:
        return ""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def human_size(size: object) -> str:
    """812 B, 33.5 KiB, 1.2 MiB; "?" for what is not a size."""
    if not isinstance(size, int) or size < 0:
        return "?"
    if size < 1024:
        return f"{size} B"
    return f"{size / 1024:.1f} KiB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.1f} MiB"


def human_time(value: object) -> str:
    """An ISO time or an epoch as local time: 14:03:12 today, 12-01 14:03 otherwise."""
    from datetime import datetime

    try:
        if isinstance(value, int | float):
            when = datetime.fromtimestamp(float(value)).astimezone()
        else:
            when = datetime.fromisoformat(str(value)).astimezone()
    except (ValueError, OverflowError, OSError):
        return str(value)[:19]
    now = datetime.now().astimezone()
    return when.strftime("%H:%M:%S") if when.date() == now.date() else when.strftime("%m-%d %H:%M")


def progress_text(progress: object) -> str:
    """A job's latest progress in words: "42% · round 3 of 10"."""
    if not isinstance(progress, dict):
        return ""
    parts = []
    fraction = progress.get("fraction")
    if isinstance(fraction, int | float):
        parts.append(f"{fraction:.0%}")
    if progress.get("message"):
        parts.append(str(progress["message"]))
    return " · ".join(parts)


# Shown by --json, left out of the human view to keep it readable.
HIDDEN = frozenset(
    {"errors", "log_tail", "created_at", "updated_at", "ended_at", "detached", "caller", "origin", "digest"}
)


def print_result(result: TaskResult, console: Any = out) -> None:
    style = STATUS_STYLE.get(result.status, "white")
    task, execution = escape(result.task_id), escape(result.execution_id)
    console.print(f"[bold {style}]{result.status.value}[/]  {task}  [dim]{execution}[/]")
    if result.message:
        # The headline names the task already: "demo.farm_instance: instance_name: …" says it twice.
        message = result.message.removeprefix(f"{result.task_id}: ")
        console.print(f"  {escape(message)}")
    shown = {k: v for k, v in result.data.items() if k not in HIDDEN and v is not None}
    for key, value in shown.items():
        if key == "progress":
            text = progress_text(value)
        elif key.endswith("_at") or key in ("started", "ended", "heartbeat"):
            text = human_time(value)
        else:
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        console.print(f"  [dim]{escape(key)}:[/] {escape(text)}")
    if result.data.get("log_tail"):
        console.print("  [dim]log tail:[/]")
        for line in str(result.data["log_tail"]).splitlines():
            console.print(f"    [dim]{escape(line)}[/]")
    if result.duration_seconds:
        console.print(f"  [dim]{human_duration(result.duration_seconds)}[/]")


async def show_progress(executor: Any, execution_id: str) -> None:
    """Draw a live progress bar from the execution's events.jsonl until cancelled."""
    import asyncio

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    paths = executor.jobs.paths(execution_id)
    from tether.execution.protocol import last_progress

    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=err.real(),
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
