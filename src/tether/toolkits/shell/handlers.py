"""The shell tasks' handlers; imported only inside workers.

A command runs as ``subprocess.Popen(argv, shell=False)``: stdin closed, stderr merged into stdout, the
environment reduced to the command's ``env`` names, in its own session and process group. A stop
request (or the time limit) ends the whole group: SIGTERM, then SIGKILL after ``KILL_GRACE_S``; if the
worker itself is interrupted or killed first, the ``finally`` below (or the executor's tree kill) does.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any

from tether.config import ShellSettings
from tether.errors import ConfigError, StopRequested, TaskFailed
from tether.tasks.context import TaskContext
from tether.toolkits.shell.allowlist import (
    FOREGROUND_TIMEOUT_S,
    ArgumentRefused,
    Command,
    build_argv,
    load_commands,
    pick,
)

KILL_GRACE_S = 2.0
POLL_S = 0.05
MAX_LINES_PER_S = 50  # streamed as progress; beyond this, lines are counted and summarized
TAIL_LINES = 200  # lines of output kept for the result (head and tail)


def _load(ctx: TaskContext, *, background: bool) -> tuple[Command, list[str], ShellSettings]:
    params: Any = ctx.params
    try:
        settings = ShellSettings.load(ctx.home)
        commands = load_commands(ctx.home)
    except ConfigError as exc:
        raise TaskFailed(f"the shell commands are misconfigured: {exc.message}") from None
    # The executor validated the shape; the allowlist is checked here, against this home's settings.
    command = pick(commands, params.command, background=background)
    if command.destructive and not params.destructive:
        raise ArgumentRefused(
            f"{command.name!r} is marked destructive: call again with destructive=true (the person is asked "
            "to confirm that exact call)",
            param="destructive",
        )
    return command, build_argv(command, params.args), settings


def list_commands(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    try:
        commands = load_commands(ctx.home)
    except ConfigError as exc:
        raise TaskFailed(f"the shell commands are misconfigured: {exc.message}") from None
    described = [command.describe() for command in commands.values()]
    return f"{len(described)} allow-listed commands: {', '.join(commands)}", {"commands": described}


def run(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    command, argv, settings = _load(ctx, background=False)
    return _execute(ctx, command, argv, settings, stream=False)


def start(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    command, argv, settings = _load(ctx, background=True)
    return _execute(ctx, command, argv, settings, stream=True)


class _Output:
    """The first and last lines of a command's output, within a character budget."""

    def __init__(self, max_chars: int) -> None:
        self.head: list[str] = []
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.head_chars = 0
        self.max_chars = max_chars
        self.lines = 0

    def add(self, line: str) -> None:
        self.lines += 1
        if self.head_chars + len(line) <= self.max_chars // 2 and len(self.head) < TAIL_LINES:
            self.head.append(line)
            self.head_chars += len(line) + 1
        else:
            self.tail.append(line)

    def text(self) -> tuple[str, bool]:
        tail = list(self.tail)
        budget = self.max_chars - self.head_chars
        kept: list[str] = []
        for line in reversed(tail):
            if budget - len(line) - 1 < 0:
                break
            kept.append(line)
            budget -= len(line) + 1
        kept.reverse()
        left_out = self.lines - len(self.head) - len(kept)
        middle = [f"[… {left_out} lines left out …]"] if left_out else []
        return "\n".join([*self.head, *middle, *kept]), bool(left_out)


def _decode(raw: bytes, limit: int) -> str:
    raw = raw.rstrip(b"\r\n")
    for encoding in ("utf-8", "gb18030"):
        try:
            line = raw.decode(encoding)
            break
        except UnicodeDecodeError:
            continue
    else:
        line = raw.decode("utf-8", errors="replace")
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return line


def _reader(pipe: Any, lines: queue.Queue[bytes | None], limit: int) -> None:
    try:
        while True:
            # Bounded reads: a line without a newline never grows without limit.
            raw = pipe.readline(limit * 4 + 4)
            if not raw:
                break
            lines.put(raw)
    finally:
        lines.put(None)


def _terminate(child: subprocess.Popen[bytes]) -> None:
    """End the command's whole process group: SIGTERM, then SIGKILL after a grace period."""
    if child.poll() is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # leftovers of a group whose leader has exited
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(KILL_GRACE_S)


def _execute(
    ctx: TaskContext, command: Command, argv: list[str], settings: ShellSettings, *, stream: bool
) -> tuple[str, dict[str, Any]]:
    env = {name: os.environ[name] for name in command.env if name in os.environ}
    limit = command.timeout_s or (None if stream else FOREGROUND_TIMEOUT_S)
    ctx.log.info("shell %s: %s (cwd %s)", command.name, argv, command.cwd)
    try:
        child = subprocess.Popen(
            argv,
            shell=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=command.cwd,
            env=env,
            close_fds=True,
            start_new_session=sys.platform != "win32",  # its own group: a stop reaches all it started
        )
    except OSError as exc:
        raise TaskFailed(f"{command.name}: could not start {argv[0]!r}: {exc.strerror or exc}") from None
    lines: queue.Queue[bytes | None] = queue.Queue(maxsize=10_000)
    reader = threading.Thread(
        target=_reader, args=(child.stdout, lines, settings.max_line_chars), name="shell-output", daemon=True
    )
    reader.start()
    output = _Output(settings.max_output_chars)
    started = time.monotonic()
    deadline = None if limit is None else started + limit
    window, sent, skipped = started, 0, 0
    ended = "exit"
    try:
        eof = False
        while not (eof and child.poll() is not None):
            raw: bytes | None = b""
            if eof:  # output is closed: only the exit is left to wait for
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(POLL_S)
            else:
                with contextlib.suppress(queue.Empty):
                    raw = lines.get(timeout=POLL_S)
            if raw is None:
                eof = True
            elif raw:
                line = _decode(raw, settings.max_line_chars)
                output.add(line)
                if stream:  # each streamed line goes to the log once, with its progress event
                    now = time.monotonic()
                    if now - window >= 1.0:
                        if skipped:
                            ctx.progress(None, f"[… {skipped} lines not streamed …]")
                        window, sent, skipped = now, 0, 0
                    if sent < MAX_LINES_PER_S:
                        ctx.progress(None, line)
                        sent += 1
                    else:
                        skipped += 1
            if ctx.should_stop():
                ended = "stop"
                break
            if deadline is not None and time.monotonic() > deadline:
                ended = "timeout"
                break
    finally:
        # Whatever ends this loop (a stop, the time limit, an interrupt of the worker), the command's
        # group does not outlive the task.
        _terminate(child)
        reader.join(KILL_GRACE_S)
        if child.stdout is not None:
            child.stdout.close()
    code = child.returncode
    text, clipped = output.text()
    data: dict[str, Any] = {
        "command": command.name,
        "exit_code": code,
        "output": text,
        "clipped": clipped,
        "lines": output.lines,
        "seconds": round(time.monotonic() - started, 3),
    }
    if ended == "stop":
        raise StopRequested(f"{command.name} was stopped", **data)
    if ended == "timeout":
        raise TaskFailed(f"{command.name} ran over its time limit of {limit:g}s and was ended", **data)
    if code != 0:
        raise TaskFailed(f"{command.name} exited with code {code}", **data)
    return f"{command.name} finished (exit code 0, {output.lines} lines of output)", data
