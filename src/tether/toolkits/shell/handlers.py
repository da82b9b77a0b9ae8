"""The shell tasks' handlers; imported only inside workers.

A command runs as ``subprocess.Popen(argv, shell=False)``: stdin closed, stderr merged into stdout, the
environment reduced to the command's ``env`` names, in its own session, inside a ``containment.Tree``
(its own cgroup, or below the worker as a child subreaper). When the task ends — the command exits, a
stop request, the time limit, an interrupt of the worker — the whole tree ends with it, however its
processes detached: SIGTERM, then SIGKILL after ``KILL_GRACE_S``. If the worker is killed first, the
job manager's tree kill finds the detached ones below the worker. The output pipe is never waited on
for more than ``POLL_S`` at a time, so a process holding it open cannot hold the task past its limit.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tether.config import ShellSettings
from tether.errors import ConfigError, StopRequested, TaskFailed
from tether.tasks.context import TaskContext
from tether.toolkits.shell import containment
from tether.toolkits.shell.allowlist import (
    FOREGROUND_TIMEOUT_S,
    ArgumentRefused,
    Command,
    build_argv,
    load_commands,
    pick,
)

KILL_GRACE_S = 2.0
LINGER_S = 1.0  # after the command exits, how long what it started may hold its output open
REAP_EVERY_S = 0.5
POLL_S = 0.05
_PROC_FDS = os.path.isdir("/proc/self/fd")  # a folder's descriptor can be named as a path (Linux)
MAX_LINES_PER_S = 50  # streamed as progress; beyond this, lines are counted and summarized
TAIL_LINES = 200  # lines of output kept for the result (head and tail)


def _load(ctx: TaskContext, *, background: bool) -> tuple[Command, dict[str, str], ShellSettings]:
    params: Any = ctx.params
    try:
        settings = ShellSettings.load(ctx.home)
        commands = load_commands(ctx.home)
    except ConfigError as exc:
        raise TaskFailed(f"the shell commands are misconfigured: {exc.message}") from exc
    # The executor validated the shape; the allowlist is checked here, against this home's settings.
    command = pick(commands, params.command, background=background)
    if command.destructive and not params.destructive:
        raise ArgumentRefused(
            f"{command.name!r} is marked destructive: call again with destructive=true (the person is asked "
            "to confirm that exact call)",
            param="destructive",
        )
    build_argv(command, params.args)  # refused here, before anything is prepared; checked again at the start
    return command, params.args, settings


@contextlib.contextmanager
def _folder(command: Command) -> Iterator[tuple[int | None, Path]]:
    """The command's folder opened (walked from its root with O_NOFOLLOW at every step), and where it
    is now: the values are checked from there and the command starts in that very folder, so a link
    put at the folder's path after the check cannot move it elsewhere."""
    if command.roots is None or command.located is None or not _PROC_FDS:
        yield None, command.cwd
        return
    with command.roots.dir_fd(command.located) as fd:
        yield fd, Path(os.readlink(f"/proc/self/fd/{fd}"))


def list_commands(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    try:
        commands = load_commands(ctx.home)
    except ConfigError as exc:
        raise TaskFailed(f"the shell commands are misconfigured: {exc.message}") from exc
    described = [command.describe() for command in commands.values()]
    return f"{len(described)} allow-listed commands: {', '.join(commands)}", {"commands": described}


def run(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    command, values, settings = _load(ctx, background=False)
    return _execute(ctx, command, values, settings, stream=False)


def start(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    command, values, settings = _load(ctx, background=True)
    return _execute(ctx, command, values, settings, stream=True)


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


def _reader(fd: int, lines: queue.Queue[bytes | None], limit: int) -> None:
    """Split the command's output into lines. It reads the descriptor itself, never a buffered file:
    the task must be able to give up on a pipe that a stray process holds open, and a buffered file's
    close waits for the read blocked in it."""
    longest = limit * 4 + 4  # bytes: a line without a newline never grows without limit
    pending = b""
    try:
        while chunk := os.read(fd, 65536):
            pending += chunk
            while True:
                cut = pending.find(b"\n", 0, longest)
                if cut < 0 and len(pending) < longest:
                    break
                end = cut + 1 if cut >= 0 else longest
                lines.put(pending[:end])
                pending = pending[end:]
        if pending:
            lines.put(pending)
    except OSError:
        pass
    finally:
        lines.put(None)


class _Lines:
    """What the task does with each line: keep it for the result, stream it as progress (limited)."""

    def __init__(self, ctx: TaskContext, settings: ShellSettings, *, stream: bool) -> None:
        self.ctx = ctx
        self.limit = settings.max_line_chars
        self.output = _Output(settings.max_output_chars)
        self.stream = stream
        self.window, self.sent, self.skipped = time.monotonic(), 0, 0

    def take(self, raw: bytes) -> None:
        line = _decode(raw, self.limit)
        self.output.add(line)
        if not self.stream:
            return
        # Each streamed line goes to the log once, with its progress event.
        now = time.monotonic()
        if now - self.window >= 1.0:
            if self.skipped:
                self.ctx.progress(None, f"[… {self.skipped} lines not streamed …]")
            self.window, self.sent, self.skipped = now, 0, 0
        if self.sent < MAX_LINES_PER_S:
            self.ctx.progress(None, line)
            self.sent += 1
        else:
            self.skipped += 1


def _follow(
    ctx: TaskContext,
    child: subprocess.Popen[bytes],
    tree: containment.Tree,
    queued: queue.Queue[bytes | None],
    lines: _Lines,
    deadline: float | None,
) -> str:
    """Take the command's lines until it ends (``exit``), is stopped (``stop``) or runs over its time
    limit (``timeout``); never waits on the pipe longer than ``POLL_S`` at a time."""
    eof = False
    exited_at: float | None = None
    reaped = time.monotonic()
    while True:
        raw: bytes | None = b""
        if eof:  # output is closed: only the exit is left to wait for
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(POLL_S)
        else:
            with contextlib.suppress(queue.Empty):
                raw = queued.get(timeout=POLL_S)
        if raw is None:
            eof = True
        elif raw:
            lines.take(raw)
        now = time.monotonic()
        if child.poll() is not None:
            if eof:
                return "exit"
            # The command has exited but something it started holds its output open: a moment for
            # the last lines, then that goes with the rest of the tree.
            exited_at = exited_at or now
            if now - exited_at >= LINGER_S:
                return "exit"
        if now - reaped >= REAP_EVERY_S:  # orphans the worker adopted that have exited
            tree.reap()
            reaped = now
        if ctx.should_stop():
            return "stop"
        if deadline is not None and now > deadline:
            return "timeout"


def _execute(
    ctx: TaskContext, command: Command, values: dict[str, str], settings: ShellSettings, *, stream: bool
) -> tuple[str, dict[str, Any]]:
    env = {name: os.environ[name] for name in command.env if name in os.environ}
    limit = command.timeout_s or (None if stream else FOREGROUND_TIMEOUT_S)
    tree = containment.Tree.prepare()
    try:
        with _folder(command) as (fd, folder):
            # Checked again from the folder as it is now, at the last moment before the start: what is
            # left is a link swapped in between this check and the program's own open of the path.
            argv = build_argv(command, values, folder=folder)
            ctx.log.info("shell %s: %s (cwd %s)", command.name, argv, folder)
            child = tree.spawn(argv, cwd=folder if fd is None else fd, env=env)
    except OSError as exc:
        tree.release()
        raise TaskFailed(
            f"{command.name}: could not start {command.program!r}: {exc.strerror or exc}"
        ) from exc
    except BaseException:
        tree.release()
        raise
    assert child.stdout is not None
    ctx.log.info("contained by %s%s", tree.mode, f" ({tree.why})" if tree.why else "")
    queued: queue.Queue[bytes | None] = queue.Queue(maxsize=10_000)
    reader = threading.Thread(
        target=_reader,
        args=(child.stdout.fileno(), queued, settings.max_line_chars),
        name="shell-output",
        daemon=True,
    )
    reader.start()
    lines = _Lines(ctx, settings, stream=stream)
    started = time.monotonic()
    deadline = None if limit is None else started + limit
    ended, left = "exit", []
    try:
        ended = _follow(ctx, child, tree, queued, lines, deadline)
    finally:
        # Whatever ends the command (its exit, a stop, the time limit, an interrupt of the worker), no
        # process it started outlives the task, however it detached.
        left = tree.end(KILL_GRACE_S)
    if left:
        ctx.log.warning("shell %s: processes %s could not be ended", command.name, left)
    # Every writer is gone (or out of reach): what is still in the pipe is read, for a bounded time.
    drained = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < drained:
        try:
            raw = queued.get(timeout=POLL_S)
        except queue.Empty:
            if reader.is_alive():
                continue
            break
        if raw is None:
            break
        lines.take(raw)
    if not reader.is_alive():
        child.stdout.close()  # else a process out of reach holds the pipe: the worker's exit closes it
    code = child.returncode
    text, clipped = lines.output.text()
    data: dict[str, Any] = {
        "command": command.name,
        "exit_code": code,
        "containment": tree.mode,
        "output": text,
        "clipped": clipped,
        "lines": lines.output.lines,
        "seconds": round(time.monotonic() - started, 3),
    }
    if left:
        data["left_running"] = left
    if ended == "stop":
        raise StopRequested(f"{command.name} was stopped", **data)
    if ended == "timeout":
        raise TaskFailed(f"{command.name} ran over its time limit of {limit:g}s and was ended", **data)
    if code != 0:
        raise TaskFailed(f"{command.name} exited with code {code}", **data)
    return f"{command.name} finished (exit code 0, {lines.output.lines} lines of output)", data
