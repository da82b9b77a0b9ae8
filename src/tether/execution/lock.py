"""Named resource locks, scoped to one tether home (contract 7).

POSIX uses ``flock`` on ``<home>/locks/<name>.lock``; Windows uses ``msvcrt.locking`` on the same file.
The lock is held by the open file, so it is released by the OS when the holder dies, however it dies.
After taking a lock the holder writes ``<name>.owner.json`` (execution_id, task_id, pid) so a contender
can answer "blocked by execution X" instead of "busy". The owner file is advisory: the OS lock decides.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from tether.errors import LockBusy

LOCKS_DIR = "locks"


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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Python opens files non-inheritable, so a handler's subprocesses never keep the lock alive.
        handle = open(self.path, "a+b")
        if not _try_lock(handle):
            handle.close()
            owner = self.owner()
            holder = owner.get("execution_id", "unknown")
            raise LockBusy(
                f"resource {self.name!r} is in use by execution {holder} ({owner.get('task_id', '?')})",
                resource=self.name,
                blocked_by=holder,
                holder=owner,
            )
        self._handle = handle
        record = {"execution_id": execution_id, "task_id": task_id, "pid": os.getpid(), "since": time.time()}
        tmp = self.owner_path.with_name(f".{self.owner_path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
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
            return json.loads(self.owner_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def is_locked(self) -> bool:
        """Whether someone holds the lock right now (probes by taking and dropping it)."""
        if self.held:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as handle:
            if _try_lock(handle):
                _unlock(handle)
                return False
            return True


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


if sys.platform == "win32":
    import msvcrt

    def _try_lock(handle: IO[bytes]) -> bool:
        handle.seek(0)
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

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

    def _unlock(handle: IO[bytes]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
