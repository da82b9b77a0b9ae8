"""Named resource locks, scoped to one tether home (contract 7), and short exclusive file locks.

POSIX uses ``flock`` on ``<home>/locks/<name>.lock``; Windows uses ``msvcrt.locking`` on the same file.
The lock is held by the open file, so it is released by the OS when the holder dies, however it dies.
After taking a lock the holder writes ``<name>.owner.json`` (execution_id, task_id, pid, start time)
so a contender can answer "blocked by execution X" instead of "busy". The owner file is advisory: the
OS lock decides, and an owner record is believed only while the process it names is alive. Nobody
ever takes a resource lock just to look at it (a probe could make a real taker fail).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from tether.errors import LockBusy
from tether.execution import process

LOCKS_DIR = "locks"
# A contender that finds a lock busy but no live owner on record (the holder is between taking the
# lock and writing its record) looks again for this long before it names no one.
OWNER_SETTLE_S = 0.5


def _open_private(path: Path) -> IO[bytes]:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+b")


class ResourceLock:
    """One named lock of one tether home. Not re-entrant; never blocks."""

    def __init__(self, home: Path, name: str) -> None:
        self.home = home
        self.name = name
        self.path = home / LOCKS_DIR / f"{name}.lock"
        self.owner_path = home / LOCKS_DIR / f"{name}.owner.json"
        self._handle: IO[bytes] | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def acquire(self, *, execution_id: str, task_id: str) -> None:
        """Take the lock now or raise ``LockBusy`` naming the holder."""
        # Python opens files non-inheritable, so a handler's subprocesses never keep the lock alive.
        handle = _open_private(self.path)
        owner: dict[str, Any] = {}
        deadline = time.monotonic() + OWNER_SETTLE_S
        while not _try_lock(handle):
            # Busy: by its owner on record; or by a holder between taking the lock and writing its
            # record, or between removing it and letting go — look again (it may be free by now).
            owner = self.live_owner()
            if owner or time.monotonic() >= deadline:
                handle.close()
                if owner:
                    message = (
                        f"resource {self.name!r} is in use by execution {owner.get('execution_id')} "
                        f"({owner.get('task_id')})"
                    )
                else:
                    message = f"resource {self.name!r} is in use by a task that is starting or ending"
                raise LockBusy(
                    message, resource=self.name, blocked_by=owner.get("execution_id"), holder=owner
                )
            time.sleep(0.01)
        self._handle = handle
        me = process.current()
        record = {
            "execution_id": execution_id,
            "task_id": task_id,
            "pid": me.pid,
            "create_time": me.create_time,
            "since": time.time(),
        }
        tmp = self.owner_path.with_name(f".{self.owner_path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(record, out)
        os.replace(tmp, self.owner_path)

    def release(self) -> None:
        if self._handle is None:
            return
        try:
            self.owner_path.unlink(missing_ok=True)
        finally:
            _unlock(self._handle)
            self._handle.close()
            self._handle = None

    def owner(self) -> dict[str, Any]:
        try:
            owner = json.loads(self.owner_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return {}
        return owner if isinstance(owner, dict) else {}

    def live_owner(self, settle_s: float = 0.0) -> dict[str, Any]:
        """The owner record if the process it names still runs, else {} (after ``settle_s`` of looking)."""
        deadline = time.monotonic() + settle_s
        while True:
            owner = self.owner()
            if _alive(owner):
                return owner
            if time.monotonic() >= deadline:
                return {}
            time.sleep(0.01)


def _alive(owner: dict[str, Any]) -> bool:
    try:
        ref = process.ProcessRef(pid=int(owner["pid"]), create_time=float(owner["create_time"]))
    except (KeyError, TypeError, ValueError):
        return False
    return process.is_alive(ref)


def holder(home: Path, names: Iterable[str]) -> tuple[str, dict[str, Any]] | None:
    """(resource, owner record) of the first of ``names`` held by a live process, without touching
    the lock itself; None when the records show none held. The worker's own acquire decides."""
    for name in sorted(set(names)):
        owner = ResourceLock(home, name).live_owner()
        if owner:
            return name, owner
    return None


class LockSet:
    """Several resource locks taken all-or-nothing, in name order so two takers cannot deadlock."""

    def __init__(self, home: Path, names: Iterable[str]) -> None:
        self.locks = [ResourceLock(home, name) for name in sorted(set(names))]

    def acquire(self, *, execution_id: str, task_id: str) -> None:
        taken: list[ResourceLock] = []
        try:
            for lock in self.locks:
                lock.acquire(execution_id=execution_id, task_id=task_id)
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()


def try_hold(path: Path) -> IO[bytes] | None:
    """Take the lock file ``path`` now and keep it until the handle is closed (or the process ends);
    None if another process holds it. For locks that name a live process (an executor slot)."""
    handle = _open_private(path)
    if _try_lock(handle):
        return handle
    handle.close()
    return None


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for a short critical section (blocks until it is free)."""
    handle = _open_private(path)
    try:
        _lock_blocking(handle)
        try:
            yield
        finally:
            _unlock(handle)
    finally:
        handle.close()


@contextlib.contextmanager
def exclusive_dir(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the folder ``path`` itself for a short critical section (POSIX: an
    ``flock`` on the folder, no lock file; elsewhere a ``.lock`` file inside it)."""
    if sys.platform == "win32":
        with exclusive(path / ".lock"):
            yield
        return
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield  # closing the descriptor lets go
    finally:
        os.close(fd)


if sys.platform == "win32":
    import msvcrt

    def _try_lock(handle: IO[bytes]) -> bool:
        handle.seek(0)
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _lock_blocking(handle: IO[bytes]) -> None:
        while not _try_lock(handle):
            time.sleep(0.005)

    def _unlock(handle: IO[bytes]) -> None:
        handle.seek(0)
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)
        except OSError:
            pass

else:
    import fcntl

    def _try_lock(handle: IO[bytes]) -> bool:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _lock_blocking(handle: IO[bytes]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)

    def _unlock(handle: IO[bytes]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
