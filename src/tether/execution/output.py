"""What an inline task prints goes to its job's log, never into the output of the process it runs in.

A worker's stdout and stderr are its log file. An inline task runs inside its caller's process: a
``print`` in its handler wrote into that process's own output — into the one document of ``tether flow
run --json`` or ``tether task run --json``, say. (``tether mcp serve`` over stdio was safe already: the
MCP SDK points the process's fd 1 at stderr while it serves.) ``to_log(paths)`` routes the handler's
writes to ``worker.log`` of its execution, as a worker's would be (``tether job log`` reads it), while
every other writer of the process keeps its streams.

The routing follows the handler, not the process: ``sys.stdout`` and ``sys.stderr`` are replaced once by
streams that write where the current context says (a context variable, which the ``asyncio`` tasks and
``asyncio.to_thread`` threads a handler runs in carry along), and to the original stream everywhere else.
The log file is opened only when the handler first writes, so a quiet task costs nothing. Not routed: a
thread the handler starts itself (it does not inherit the context), writes to ``sys.stdout.buffer`` or to
file descriptor 1, and child processes (a worker task, not an inline one, is for those).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TextIO

from tether.execution.protocol import ExecutionPaths, private_mkdir

_TARGET: ContextVar[_Log | None] = ContextVar("tether_inline_output", default=None)
_INSTALL = threading.Lock()


class _Log:
    """One execution's log, opened on the first write."""

    def __init__(self, paths: ExecutionPaths) -> None:
        self.paths = paths
        self.file: TextIO | None = None
        self.closed = False
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            if self.closed:  # a task or thread that outlived its handler: the file opened and shut again
                with open(self.paths.log, "a", encoding="utf-8", errors="replace") as late:
                    return late.write(text)
            if self.file is None:
                private_mkdir(self.paths.dir)
                self.file = open(self.paths.log, "a", encoding="utf-8", errors="replace")
            written = self.file.write(text)
            self.file.flush()
            return written

    def close(self) -> None:
        with self.lock:
            self.closed = True
            if self.file is not None:
                self.file.close()
                self.file = None


class _Routed:
    """A process stream that writes to the current inline execution's log, if any, else to itself."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        target = _TARGET.get()
        if target is None:
            return self.stream.write(text)
        try:
            return target.write(text)
        except OSError:  # the log cannot be written: the text is not worth the caller's output
            return len(text)

    def flush(self) -> None:
        if _TARGET.get() is None:
            self.stream.flush()

    def isatty(self) -> bool:  # a log is no terminal: no colours or cursor moves written into it
        return _TARGET.get() is None and self.stream.isatty()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer …: the real stream's
        return getattr(self.stream, name)


def _install() -> None:
    with _INSTALL:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, _Routed):
                setattr(sys, name, _Routed(stream))


@contextlib.contextmanager
def to_log(paths: ExecutionPaths) -> Iterator[None]:
    """While inside (in this context and the threads and tasks it starts), what is printed goes to the
    execution's log."""
    _install()
    log = _Log(paths)
    token = _TARGET.set(log)
    try:
        yield
    finally:
        _TARGET.reset(token)
        log.close()
