"""Putting an execution on record from the event loop, in the order things happened.

The executor never blocks its event loop on the store: every transaction runs in a thread
(``off_loop``). The records that follow a spawn (the worker's pid, ``running``) are not on the critical
path of a task, so one writer thread (``RecordWriter``) takes them in the order they were queued and
nothing waits for them; only the terminal state, queued last, is awaited before ``execute`` returns. A
queued write that has not run when the terminal state is written is skipped: the terminal write carries
everything it would have said. If the store is busy, the write is logged and dropped: the worker's own
files stay the truth, and reconciling from them later puts the record right. The middle records of a
quick task are deferred (``DEFER_S``) and skipped when its terminal state comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tether.errors import StoreError
from tether.execution.process import ProcessRef
from tether.store.jobs import JobStore
from tether.tasks.result import TaskResult

log = logging.getLogger("tether.executor")

T = TypeVar("T")


async def off_loop(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking work (a store transaction, a file fsync, a flock) off the event loop."""
    return await asyncio.to_thread(function, *args, **kwargs)


# The records of a quick task's middle (its worker's pid, ``running``) wait this long before they are
# written: a task that ends sooner gets one terminal write carrying them all (two fewer transactions).
DEFER_S = 0.05


class RecordWriter:
    """One thread that writes an executor's follow-up records to ``store`` in the order they came."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-records")
        self._settled: set[str] = set()
        self._deferred: dict[str, list[tuple[asyncio.TimerHandle, Callable[[], None]]]] = {}

    async def now(self, write: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """A store write after the spawn, in order with the ones queued before it; the worker's own
        files stay the truth if the store is busy."""
        try:
            call = functools.partial(write, *args, **kwargs)
            await asyncio.get_running_loop().run_in_executor(self._writer, call)
        except StoreError as exc:
            log.warning("could not record the state of %s yet: %s", args[0] if args else "?", exc.message)

    def later(self, execution_id: str, write: Callable[..., object], *args: Any, defer: bool = False) -> None:
        """Queue a store write that nothing waits for (the terminal write, queued after it, does); it is
        skipped if the execution's terminal state was recorded first (the terminal write carries it).
        ``defer``: queue it only ``DEFER_S`` from now, unless the terminal write came first (call this
        on the event loop then)."""

        def run() -> None:
            if execution_id in self._settled:
                return
            try:
                write(*args)
            except StoreError as exc:
                log.warning("could not record the state of %s yet: %s", execution_id, exc.message)

        if not defer:
            self._writer.submit(run)
            return
        waiting = self._deferred.setdefault(execution_id, [])

        def due() -> None:
            waiting[:] = [entry for entry in waiting if entry[1] is not run]
            if not waiting:
                self._deferred.pop(execution_id, None)
            with contextlib.suppress(RuntimeError):  # closed meanwhile: close() wrote it
                self._writer.submit(run)

        waiting.append((asyncio.get_running_loop().call_later(DEFER_S, due), run))

    async def final(self, published: TaskResult, ref: ProcessRef) -> None:
        """The terminal state, with the worker that reached it, in one write; earlier queued writes of
        this execution that have not run yet are skipped (they say less)."""
        for handle, _ in self._deferred.pop(published.execution_id, []):
            handle.cancel()
        self._settled.add(published.execution_id)
        try:
            await self.now(self.store.transition, published, process=(ref.pid, ref.create_time))
        finally:
            self._settled.discard(published.execution_id)

    def close(self) -> None:
        """Write the queued and deferred records: they land before the store closes."""
        deferred, self._deferred = self._deferred, {}
        for waiting in deferred.values():
            for handle, run in waiting:
                handle.cancel()
                self._writer.submit(run)
        self._writer.shutdown(wait=True)
