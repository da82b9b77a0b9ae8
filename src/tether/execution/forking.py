"""Forking from a warm server, and reaping what it forked (POSIX): the one implementation that both
preloaded servers use, the task fork server (forkserver.py) and the CLI server (interfaces/zygote.py).

A server that forks keeps its children in ``Children``: SIGCHLD only writes to a wake-up pipe (a handler
rather than ``SIG_IGN``, so children stay reapable, and the pipe wakes the server's ``select``), and
``reap`` collects every child that ended without blocking, writing a worker's exit code to its
result file (where the executor looks) and handing any other child's status to the server. A forked
child first leaves the server behind (``leave_server``: the server's signal plumbing undone and its
descriptors closed), becomes its own session where it must, and takes its standard streams
(``take_stdio``); ``run_as_forked_child`` then runs its body and ends it with ``os._exit``, never with
the server's cleanup. ``fork_worker`` is all of that for one task's worker: a fresh session and process
group, stdin on /dev/null, stdout and stderr on its ``worker.log``, and the worker's own entry point
(which takes the environment its signed request names).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from tether.execution import process, worker
from tether.execution.protocol import ExecutionPaths, write_exit

process.prepare_for_forks()  # only servers that fork import this module


class Children:
    """The children of one forking server, and the pipe their ends wake it through."""

    def __init__(self) -> None:
        self.workers: dict[int, Path] = {}  # worker pid → its execution folder
        self.wake_r, self.wake_w = os.pipe()

    @property
    def fds(self) -> list[int]:
        """The server's own descriptors: every child closes them."""
        return [self.wake_r, self.wake_w]

    def catch_sigchld(self) -> None:
        """Wake ``wake_r`` whenever a child ends (or any other signal with a handler arrives)."""
        for fd in self.fds:
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)

    def drain(self) -> None:
        """Empty the wake-up pipe (after ``select`` found it readable)."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake_r, 4096)

    def fork_worker(
        self, exec_dir: Path, keep_closed: Iterable[int] = (), keys: Mapping[str, object] | None = None
    ) -> int:
        """Fork the worker of ``exec_dir``; its pid. ``keep_closed``: more descriptors the child must
        not hold (other clients' connections). ``keys``: the secrets its starter hands it
        (``credentials.accept_handed``). ``OSError`` when the fork fails."""
        closing = [*self.fds, *keep_closed]
        pid = os.fork()
        if pid == 0:
            _worker_child(exec_dir, closing, keys or {})
        self.workers[pid] = exec_dir
        return pid

    def reap(self, ended: Callable[[int, int], None] | None = None, *, others: bool = False) -> int:
        """Reap every child that has ended, without blocking; how many were. A worker's exit code goes to
        its result file; any other child's wait status to ``ended(pid, status)``. ``others``: the server
        has children besides workers (without any child, nothing is asked of the kernel)."""
        reaped = 0
        while self.workers or others:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            reaped += 1
            exec_dir = self.workers.pop(pid, None)
            if exec_dir is not None:
                with contextlib.suppress(OSError):
                    write_exit(ExecutionPaths(exec_dir), os.waitstatus_to_exitcode(status), pid)
            elif ended is not None:
                ended(pid, status)
        return reaped


def leave_server(keep_closed: Iterable[int], *, default: Iterable[signal.Signals]) -> None:
    """First thing in a forked child: the ``default`` signals back to their default action, no wake-up
    descriptor (that pipe is the server's), and the server's descriptors closed."""
    for sig in default:
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    for fd in keep_closed:
        with contextlib.suppress(OSError):
            os.close(fd)


def take_stdio(fds: Sequence[int]) -> None:
    """Make ``fds`` this process's stdin, stdout and stderr (in that order), then close them under
    their old numbers (one may serve twice: a log is both stdout and stderr)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)


def _worker_child(exec_dir: Path, keep_closed: list[int], keys: Mapping[str, object]) -> NoReturn:
    """Runs in the forked child; never returns."""

    def run() -> int:
        import tether.credentials as credentials

        credentials.accept_handed(keys)
        os.setsid()
        leave_server(keep_closed, default=(signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(ExecutionPaths(exec_dir).log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        take_stdio([null, log, log])
        return worker.main([str(exec_dir)])

    run_as_forked_child(run)


def run_as_forked_child(body: Callable[[], int | None], *, code: int = 70) -> NoReturn:
    """Run ``body`` in a process just forked from a preloaded server and leave with its exit code:
    ``SystemExit`` keeps its code, anything else is printed; streams are flushed and the process ends
    with ``os._exit`` (a fork must never run its parent's cleanup)."""
    try:
        result = body()
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        # The body has ended and said so: a signal now must neither interrupt the flush below (its
        # exception would escape into the server's code this process was forked from) nor change
        # how the process ends.
        with contextlib.suppress(Exception):
            signal.pthread_sigmask(signal.SIG_BLOCK, _CATCHABLE)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(code)


_CATCHABLE = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}
