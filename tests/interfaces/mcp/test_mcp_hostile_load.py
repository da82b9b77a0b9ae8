"""``tether mcp serve`` under a hostile client, with the SDK's own client as the peer (in memory, both
protocol eras): a flood of concurrent calls, good and bad, each answered once and recorded once, and
the server still serving afterwards; and a client that cancels its calls at every point of a job's life,
racing its completion: each job ends (completed or stopped), none runs twice, and the resource it held
serves the next call."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from tests.interfaces.mcp.peers import GOLD, MODES, in_memory, text
from tests.support.helpers import FAST, wait_for
from tether.execution.executor import Executor
from tether.store.database import DB_FILE
from tether.tasks.callers import MCP
from tether.tasks.result import TaskStatus
from tether.toolkits.demo import game

FLOOD = 60
SAFE = ("demo.status", {})  # inline, no resource: every one of them may run at once
# (tool, arguments, what its error must say): a wrong call is told what is allowed instead.
WRONG: list[tuple[str, dict[str, Any], str]] = [
    ("demo.salvage_relics", {"rarity": 5}, "allowed: 2, 3, 4"),
    ("demo.farm_instance", {"instance_type": "nowhere", "instance_name": "x"}, "allowed: 拟造花萼（金）"),
    ("demo.farm_instance", {**GOLD, "attempts": 1000}, "less than or equal to 99"),
    ("demo.status", {"verbose": True}, "takes no parameters"),
    ("demo.stauts", {}, "did you mean demo.status"),
    ("jobs.stat", {}, "did you mean jobs.status"),
    ("rm -rf /", {}, "no task 'rm -rf /' is available to mcp"),
]
FARM = ("demo.farm_instance", {**GOLD, "attempts": 1})
# Where a round cancels its call, counted from the moment its job is seen running: at once, early, around
# the handler's end (it sleeps one step of STEP_S, then farms) and after its answer.
CANCEL_AFTER_S = (0.0, 0.001, 0.005, 0.02, 0.035, 0.05, 0.065, 0.08, 0.1, 0.13, 0.2, 0.4)
STEP_S = "0.1"


async def until(condition: Callable[[], Any], what: str, within_s: float = 30.0) -> Any:
    """``wait_for`` for a test whose client and server share the event loop (a blocking poll would
    stall the server it waits for)."""
    deadline = time.monotonic() + within_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within_s}s waiting for {what}")
        await asyncio.sleep(0.005)
    return value


def flood_calls() -> list[tuple[str, dict[str, Any], str | None]]:
    """Half of them the safe task, the other half every kind of wrong call in turn."""
    return [(SAFE[0], SAFE[1], None) if i % 2 == 0 else WRONG[(i // 2) % len(WRONG)] for i in range(FLOOD)]


@pytest.mark.parametrize("mode", MODES)
def test_a_flood_of_concurrent_calls_is_answered_and_recorded_once_each(
    executor: Executor, mode: str
) -> None:
    calls = flood_calls()

    async def session() -> tuple[list[types.CallToolResult], set[str]]:
        async with in_memory(executor, mode) as client:
            answers = await asyncio.gather(*(client.call_tool(name, args) for name, args, _ in calls))
            listed = {t.name for t in (await client.list_tools()).tools}  # it still serves
            return answers, listed

    answers, listed = asyncio.run(asyncio.wait_for(session(), 60))
    assert {"demo.status", "demo.farm_instance", "jobs.status"} <= listed
    for (name, _, says), answer in zip(calls, answers, strict=True):
        done = answer.structured_content or {}
        if says is None:
            assert not answer.is_error and done["status"] == "completed", text(answer)
        else:
            assert answer.is_error and done["status"] in ("rejected", "not_found"), (name, text(answer))
            assert says in text(answer), (name, text(answer)[:300])
    wait_for(lambda: not executor.store.list(active=True), what="every job of the flood to end")
    records = [r for r in executor.store.list(limit=500) if r.caller == MCP]
    # Every call is on record once, as the caller mcp: none lost, none doubled.
    assert Counter(r.execution_id for r in records) == Counter(
        (a.structured_content or {})["execution_id"] for a in answers
    )
    ran = {(a.structured_content or {})["execution_id"] for a in answers if not a.is_error}
    assert len(ran) == FLOOD // 2
    assert {r.status for r in records if r.execution_id in ran} == {TaskStatus.COMPLETED}
    assert all(r.pid is None for r in records if r.execution_id not in ran)  # nothing else ran


def new_farm_job(executor: Executor, before: set[str]) -> str | None:
    """The round's job once its worker runs (or it ended already): its execution id."""
    for record in executor.store.list(limit=20):
        if record.task_id == FARM[0] and record.execution_id not in before:
            if record.status is TaskStatus.RUNNING or record.status.terminal:
                return record.execution_id
    return None


async def cancel_round(client: Client, executor: Executor, cancel_after_s: float) -> str:
    """One call of a resource-holding task, cancelled ``cancel_after_s`` after its worker began (if it
    has not answered by then); the job's execution id, once the job is final."""
    before = {r.execution_id for r in executor.store.list(limit=500)}
    call = asyncio.create_task(client.call_tool(*FARM))
    await until(lambda: call.done() or new_farm_job(executor, before), "the round's job to start")
    await asyncio.wait({call}, timeout=cancel_after_s)
    call.cancel()
    (outcome,) = await asyncio.gather(call, return_exceptions=True)
    assert isinstance(outcome, types.CallToolResult | asyncio.CancelledError), repr(outcome)
    execution_id = await until(lambda: new_farm_job(executor, before), "the round's job on record")
    record = await until(
        lambda: (found := executor.store.get(execution_id)) is not None and found.terminal and found,
        f"the cancelled job {execution_id} to end",
    )
    assert record.status in (TaskStatus.COMPLETED, TaskStatus.STOPPED), (record.status, record.message)
    if isinstance(outcome, types.CallToolResult):  # it answered before the cancel: it completed
        assert not outcome.is_error and record.status is TaskStatus.COMPLETED, text(outcome)
    return execution_id


async def call_when_free(client: Client) -> types.CallToolResult:
    """The same task again: a refusal while the resource is still held is allowed, until the deadline."""

    async def attempt() -> types.CallToolResult | None:
        result = await client.call_tool(*FARM)
        held = result.is_error and "resource" in ((result.structured_content or {}).get("data") or {})
        return None if held else result

    deadline = time.monotonic() + 30.0
    while (result := await attempt()) is None:
        if time.monotonic() > deadline:
            pytest.fail("the resource stayed in use for 30s after the cancelled job ended")
        await asyncio.sleep(0.05)
    return result


@pytest.mark.parametrize("mode", MODES)
def test_a_call_cancelled_at_any_point_of_its_job_ends_it_once_and_frees_its_resource(
    make_executor: Callable[..., Executor], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("TETHER_DEMO_STEP_S", STEP_S)  # the handler's one attempt lasts one step
    executor = make_executor()
    assert executor.execute_sync("demo.start_game", caller="cli").status is TaskStatus.COMPLETED

    async def session() -> tuple[list[str], list[str]]:
        cancelled, again = [], []
        async with in_memory(executor, mode) as client:
            for cancel_after_s in CANCEL_AFTER_S:
                cancelled.append(await cancel_round(client, executor, cancel_after_s))
                result = await call_when_free(client)
                assert not result.is_error and result.structured_content["status"] == "completed", text(
                    result
                )
                again.append(result.structured_content["execution_id"])
        return cancelled, again

    cancelled, again = asyncio.run(asyncio.wait_for(session(), 150))
    farm = [r for r in executor.store.list(limit=500) if r.task_id == FARM[0]]
    assert not [r for r in farm if not r.terminal]
    refused = [r for r in farm if r.status is TaskStatus.REJECTED]
    assert all("resource" in r.data and r.pid is None for r in refused)  # held: told so, nothing ran
    started = [r for r in farm if r.status is not TaskStatus.REJECTED]
    assert sorted(r.execution_id for r in started) == sorted(cancelled + again)  # one job per call
    completed = [r for r in started if r.status is TaskStatus.COMPLETED]
    # Each completed job farmed once and no stopped one did: the game counted exactly the completed.
    assert game.request(executor.home, "status")["farm_attempts_total"] == len(completed)
    assert len({r.data["farm_attempts_total"] for r in completed}) == len(completed)
    assert {r.status for r in started} <= {TaskStatus.COMPLETED, TaskStatus.STOPPED}


def inserting_a_job() -> bool:
    """A thread of this process is inside the job store's ``insert`` (waiting for the database)."""
    suffix = os.path.join("store", "jobs.py")
    for frame in sys._current_frames().values():
        seen: Any = frame
        while seen is not None:
            if seen.f_code.co_name == "insert" and seen.f_code.co_filename.endswith(suffix):
                return True
            seen = seen.f_back
    return False


@contextmanager
def holding_the_write_lock(home: Path) -> Iterator[None]:
    """Another writer in the home's database: a job's first record waits for it (the busy timeout)."""
    other = sqlite3.connect(home / DB_FILE, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
        other.execute("COMMIT")
    finally:
        other.close()


def test_a_call_cancelled_while_its_job_is_put_on_record_leaves_no_pending_job(
    make_executor: Callable[..., Executor], home: Path
) -> None:
    """Found by this test: a call cancelled while its pending record was being inserted never reached
    on_start, so the MCP server had no execution id to stop, and the job stayed pending for good. The
    window lasts as long as the insert of the job's pending row: another writer holding the
    database stretches it (up to the busy timeout, 10 s), and the inserting thread's stack says when the
    call is in it. A stop that waits for a worker gives up after the handshake timeout (5 s here), within
    the deadline: only a job that nothing ever ends fails."""
    executor = make_executor(settings=FAST.model_copy(update={"handshake_timeout_s": 5.0}))

    async def session() -> None:
        async with in_memory(executor, "legacy") as client:
            with holding_the_write_lock(home):
                call = asyncio.create_task(client.call_tool("demo.start_game", {}))
                await until(inserting_a_job, "the call's job to be put on record", within_s=8)
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                await client.list_tools()  # sent after the cancellation: the server has read it
            # Released: the pending row goes in, after the call that would have started its worker is gone.

    asyncio.run(asyncio.wait_for(session(), 60))

    def on_record() -> Any:
        return next((r for r in executor.store.list(limit=20) if r.task_id == "demo.start_game"), None)

    execution_id = wait_for(on_record, what="the cancelled call's job on record").execution_id

    def ended() -> bool:
        found = executor.store.get(execution_id)
        return found is not None and found.terminal

    wait_for(ended, timeout=10, what=f"the cancelled call's job {execution_id} to end")
    assert not game.is_running(home)  # and nothing of it ran
