"""The event loop is never blocked: a ticker keeps ticking while the executor stops jobs, recovers a
dead turn and waits out a busy store.

Timings are not asserted tightly (the machines are shared): the threshold is generous and catches only
what a blocking call on the loop does — stalls of the order of the busy timeout or a stop's grace.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.support.helpers import FAST
from tether.config import StoreSettings
from tether.execution.executor import Executor
from tether.runtime import Runtime
from tether.tasks.result import TaskStatus

# Far above a healthy loop's jitter, far below the stalls a blocking call produced (1-3 s).
GENEROUS_LAG_S = 0.5


async def worst_lag(work: Callable[[], Awaitable[Any]], tick_s: float = 0.01) -> tuple[float, Any]:
    """Run ``work`` while a ticker measures how late the loop wakes it; (worst lateness, result)."""
    worst = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst
        while not done.is_set():
            before = time.monotonic()
            await asyncio.sleep(tick_s)
            worst = max(worst, time.monotonic() - before - tick_s)

    ticking = asyncio.create_task(ticker())
    try:
        return worst, await work()
    finally:
        done.set()
        await ticking


def test_stopping_a_hung_job_never_stalls_the_loop(executor: Executor) -> None:
    hung = executor.execute_sync("demo.debug_hang", caller="cli")
    lag, result = asyncio.run(worst_lag(lambda: executor.control(hung.execution_id, "stop", caller="cli")))
    assert result.status is TaskStatus.STOPPED and result.data["stop_step"] == "kill"
    assert lag < GENEROUS_LAG_S, lag


def test_a_busy_store_never_stalls_the_loop(home: Path) -> None:
    """Another process holds the store's write lock for a second: the call waits, the loop does not."""
    from tests.support.registry import registry

    runtime = Runtime.open(home, settings=FAST, store_settings=StoreSettings(busy_timeout_s=5))
    with Executor(registry, runtime=runtime) as executor:
        executor.execute_sync("t.quick", caller="cli")  # warm: the store and the spawner exist

        async def scenario() -> Any:
            blocker = sqlite3.connect(home / "tether.db", isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")
            loop = asyncio.get_running_loop()
            loop.call_later(1.0, lambda: (blocker.execute("ROLLBACK"), blocker.close()))
            return await executor.execute("t.quick", caller="cli")

        lag, result = asyncio.run(worst_lag(scenario))
    runtime.close()
    assert result.status is TaskStatus.COMPLETED, result
    assert lag < GENEROUS_LAG_S, lag


def test_recovering_a_dead_turn_never_stalls_the_loop(support: Executor, home: Path) -> None:
    from tests.agent.test_recovery import run_turn_and_kill
    from tether.agent.session import ConversationSession
    from tether.testing import ScriptedModel, say

    run_turn_and_kill(home, "t__marks_and_waits", "acted", kill_worker=True)
    session = ConversationSession(support, ScriptedModel([say("checked")]))
    lag, result = asyncio.run(worst_lag(lambda: session.send("th", "what happened?")))
    assert result.status == "completed"
    assert lag < GENEROUS_LAG_S, lag
