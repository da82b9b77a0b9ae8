"""Waking on what a worker does, instead of polling for it.

Whoever waits on an execution (the executor following a task, a stop escalating, a crash being
settled) sleeps on the event loop until one of these happens:

- the worker publishes a state, or its exit code is recorded: both ring the execution's doorbell, a
  FIFO in its folder (``doorbell.py``);
- the worker's process exits: a pidfd (Linux 5.3+) becomes readable the moment it does, zombie or not;
- an interval passes: other changes ring nothing (a deadline, a claim), and where a platform has no
  FIFO or pidfd the interval is all there is, a poll.

``Wake`` never blocks the loop: file descriptors are watched with ``add_reader``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable

from tether.execution import doorbell, process
from tether.execution.protocol import ExecutionPaths


class Wake:
    """An execution's wake-up sources, registered on the running loop. Close it when done."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._watched: set[int] = set()  # read ends registered with the loop
        self._owned: list[int] = []  # every descriptor to close

    @classmethod
    def on(cls, paths: ExecutionPaths) -> Wake:
        """Listening on ``paths``' doorbell (from before the worker exists, so no ring is missed)."""
        wake = cls()
        wake.listen(paths)
        return wake

    def listen(self, paths: ExecutionPaths) -> bool:
        """Wake when the execution's doorbell rings; False where it has none (the wait polls)."""
        read_fd = doorbell.listen(paths.doorbell)
        if read_fd is None:
            return False
        try:
            # Held open so the FIFO never reports end-of-file between rings (which would spin the loop).
            write_fd = os.open(paths.doorbell, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            os.close(read_fd)
            return False
        self._owned += [read_fd, write_fd]
        self._watch(read_fd, once=False)
        return True

    def watch_exit(self, ref: process.ProcessRef) -> bool:
        """Also wake when the process ``ref`` names exits. False where that cannot be watched (no
        pidfd); a process already gone wakes the next wait at once."""
        opener = getattr(os, "pidfd_open", None)
        if opener is None:
            return False
        try:
            fd = opener(ref.pid)
        except OSError:  # no such process (or no pidfd support): gone, as far as a wait is concerned
            self._event.set()
            return False
        self._owned.append(fd)
        if not process.is_alive(ref):  # the number now names another process, or a zombie
            self._event.set()
            return True
        self._watch(fd, once=True)  # readable for good once it exits: one wake is all it gives
        return True

    def _watch(self, fd: int, *, once: bool) -> None:
        def ready() -> None:
            if once:
                self._unwatch(fd)
            else:
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    while os.read(fd, 4096):
                        pass
            self._event.set()

        self._loop.add_reader(fd, ready)
        self._watched.add(fd)

    def _unwatch(self, fd: int) -> None:
        if fd in self._watched:
            self._watched.discard(fd)
            self._loop.remove_reader(fd)

    async def wait(self, within: float) -> None:
        """Until something woke this (since the last wait returned) or ``within`` seconds passed."""
        if not self._event.is_set():
            # Not asyncio.wait_for: on Python 3.11 it loses a cancellation that arrives as the event is
            # set (gh-86296), and a doorbell that rings on every progress event makes that common: a
            # cancelled call then followed its worker to the end instead of stopping it.
            waiter = asyncio.ensure_future(self._event.wait())
            try:
                await asyncio.wait({waiter}, timeout=within)
            finally:
                waiter.cancel()
        self._event.clear()

    async def until(self, condition: Callable[[], bool], seconds: float, *, every: float) -> bool:
        """Whether ``condition`` became true within ``seconds``; it is checked on every wake and at
        least every ``every`` seconds."""
        deadline = time.monotonic() + seconds
        while True:
            self._event.clear()  # a wake from here on is not lost: the check below comes after it
            if condition():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await self.wait(min(left, every))

    def close(self) -> None:
        for fd in list(self._watched):
            self._unwatch(fd)
        for fd in self._owned:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._owned.clear()

    def __enter__(self) -> Wake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
