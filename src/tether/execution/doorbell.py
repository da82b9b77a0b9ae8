"""An execution's doorbell: a FIFO in its folder, rung so whoever waits wakes the moment something
happened instead of polling for it (``wake.py`` listens).

The worker rings it after every publication, the reaper after recording the exit code (and then
removes it: the worker's end is the last ring). Where the platform has no FIFO there is no doorbell,
and the waiter polls. A ring never blocks and never fails: nobody listening (ENXIO), a full pipe or no
doorbell at all are all fine.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PRIVATE_FILE = 0o600


def create(bell: Path) -> None:
    """Create the doorbell (POSIX); without one, the waiter simply polls."""
    if hasattr(os, "mkfifo"):
        with contextlib.suppress(FileExistsError):
            os.mkfifo(bell, PRIVATE_FILE)


def listen(bell: Path) -> int | None:
    """A non-blocking read end of the doorbell (None where there is none)."""
    return _open(bell, os.O_RDONLY)


def ring(bell: Path) -> None:
    """Wake whoever listens."""
    fd = open_bell(bell)
    if fd is not None:
        ring_on(fd)


def open_bell(bell: Path) -> int | None:
    """A write end to ring later (after the doorbell was removed, say); None when nobody listens."""
    return _open(bell, os.O_WRONLY)


def _open(bell: Path, mode: int) -> int | None:
    try:
        return os.open(bell, mode | os.O_NONBLOCK)
    except OSError:
        return None


def ring_on(fd: int) -> None:
    """Ring through ``fd`` from ``open_bell`` once, and close it."""
    try:
        os.write(fd, b"!")
    except OSError:
        pass  # the pipe is full: the listener has enough reasons to wake already
    finally:
        os.close(fd)
