"""``tether mcp serve``'s handlers with the SDK's client as a real peer, in memory, in both protocol
eras: the tools are exactly the tasks exposed to ``mcp``; every call goes through the executor; a call
that needs consent is asked about and runs once after an accept, never after a decline; a client that
cannot ask is told how to confirm; background jobs, progress and cancellation behave as for any caller."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.interfaces.mcp.peers import GOLD, MODES, Person, Progress, in_memory, text
from tests.support.helpers import wait_for
from tether.execution.executor import Executor
from tether.interfaces.mcp_server import Bridge, build_server
from tether.tasks.callers import CLI, MCP
from tether.tasks.result import TaskStatus
from tether.toolkits.demo.registry import SalvageParams


def status_of(executor: Executor, execution_id: str) -> TaskStatus | None:
    record = executor.store.get(execution_id)
    return None if record is None else record.status


def statuses(executor: Executor, task_id: str) -> list[str]:
    return [r.status.value for r in executor.store.list(limit=200) if r.task_id == task_id]


async def started_game(client: Any) -> None:
    result = await client.call_tool("demo.start_game", {})
    assert not result.is_error, text(result)


@pytest.mark.parametrize("mode", MODES)
def test_lists_exactly_the_tasks_exposed_to_mcp_with_honest_annotations(
    executor: Executor, mode: str
) -> None:
    async def session() -> list[types.Tool]:
        async with in_memory(executor, mode) as client:
            return (await client.list_tools()).tools

    tools = {t.name: t for t in asyncio.run(session())}
    assert set(tools) == {spec.task_id for spec in executor.registry.for_caller(MCP)}
    salvage = tools["demo.salvage_relics"]
    assert salvage.input_schema == SalvageParams.model_json_schema()
    assert salvage.annotations is not None and salvage.annotations.destructive_hint is True
    assert "confirm" in (salvage.description or "")
    assert "execution id" in (tools["demo.loop_farm"].description or "")
    start = tools["demo.start_game"].annotations
    assert start is not None and start.idempotent_hint is True and start.read_only_hint is False
    status = tools["jobs.status"].annotations
    assert status is not None and status.read_only_hint is True
    assert not any(t.annotations and t.annotations.open_world_hint for t in tools.values())  # no web.*


def test_a_registry_that_exposes_nothing_to_mcp_lists_only_the_job_controls(support: Executor) -> None:
    async def session() -> set[str]:
        async with in_memory(support, "auto") as client:
            return {t.name for t in (await client.list_tools()).tools}

    assert asyncio.run(session()) == {"jobs.status", "jobs.stop"}


@pytest.mark.parametrize("mode", MODES)
def test_a_call_runs_through_the_executor_as_the_caller_mcp(executor: Executor, mode: str) -> None:
    async def session() -> types.CallToolResult:
        async with in_memory(executor, mode) as client:
            return await client.call_tool("demo.start_game", {})

    result = asyncio.run(session())
    assert not result.is_error and result.structured_content["status"] == "completed"
    record = executor.store.get(result.structured_content["execution_id"])
    assert record is not None and record.caller == MCP


@pytest.mark.parametrize("mode", MODES)
def test_a_destructive_call_is_asked_about_and_runs_once_after_consent(executor: Executor, mode: str) -> None:
    person = Person("accept")

    async def session() -> types.CallToolResult:
        async with in_memory(executor, mode, person) as client:
            await started_game(client)
            return await client.call_tool("demo.salvage_relics", {"rarity": 3})

    result = asyncio.run(session())
    assert not result.is_error, text(result)
    assert len(person.asked) == 1
    assert "demo.salvage_relics" in person.asked[0] and '{"rarity": 3}' in person.asked[0]
    ran = [r for r in executor.store.list(limit=50) if r.task_id == "demo.salvage_relics"]
    assert [r.status for r in ran].count(TaskStatus.COMPLETED) == 1
    completed = executor.jobs.status(result.structured_content["execution_id"])
    assert completed.data["confirmed_by"] == "person:mcp"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("action", "confirm"), [("decline", True), ("cancel", True), ("accept", False)])
def test_a_declined_or_cancelled_question_runs_nothing(
    executor: Executor, mode: str, action: Any, confirm: bool
) -> None:
    answer = Person(action, confirm=confirm)

    async def session() -> types.CallToolResult:
        async with in_memory(executor, mode, answer) as client:
            await started_game(client)
            return await client.call_tool("demo.salvage_relics", {"rarity": 3})

    result = asyncio.run(session())
    assert result.is_error and "nothing ran" in text(result)
    assert len(answer.asked) == 1
    assert "completed" not in statuses(executor, "demo.salvage_relics")


@pytest.mark.parametrize("mode", MODES)
def test_a_client_that_cannot_ask_is_told_how_to_confirm(executor: Executor, mode: str) -> None:
    async def session() -> types.CallToolResult:
        async with in_memory(executor, mode, None) as client:
            await started_game(client)
            return await client.call_tool("demo.salvage_relics", {"rarity": 2})

    result = asyncio.run(session())
    said = text(result)
    assert result.is_error and "nothing ran" in said
    assert f"tether --home {executor.home}" in said and "task run demo.salvage_relics --params" in said
    assert "--confirm" in said
    assert "completed" not in statuses(executor, "demo.salvage_relics")


def test_an_answer_counts_once_and_only_for_the_call_asked_about(executor: Executor) -> None:
    """2026-07-28: the question's state is a one-use key bound to the task and its arguments."""
    accept = types.ElicitResult(action="accept", content={"confirm": True})

    async def session() -> list[types.CallToolResult]:
        async with in_memory(executor, "auto", Person()) as client:  # it can elicit; the test answers
            await started_game(client)
            call = client.session.call_tool

            async def ask(args: dict[str, Any]) -> types.InputRequiredResult:
                asked = await call("demo.salvage_relics", args, allow_input_required=True)
                assert isinstance(asked, types.InputRequiredResult)
                return asked

            first = await ask({"rarity": 3})
            answers: types.InputResponses = {"tether.consent": accept}
            once = await call("demo.salvage_relics", {"rarity": 3}, input_responses=answers,
                              request_state=first.request_state)  # fmt: skip
            again = await call("demo.salvage_relics", {"rarity": 3}, input_responses=answers,
                               request_state=first.request_state)  # fmt: skip
            other = await ask({"rarity": 3})
            swapped = await call("demo.salvage_relics", {"rarity": 4}, input_responses=answers,
                                 request_state=other.request_state)  # fmt: skip
            forged = await call("demo.salvage_relics", {"rarity": 3}, input_responses=answers,
                                request_state="made-up")  # fmt: skip
            return [once, again, swapped, forged]  # type: ignore[list-item]

    once, again, swapped, forged = asyncio.run(session())
    assert not once.is_error, text(once)
    for refused in (again, swapped, forged):
        assert refused.is_error and "nothing ran" in text(refused)
    assert statuses(executor, "demo.salvage_relics").count("completed") == 1


HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("demo.farm_instance", {**GOLD, "attempts": "lots"}, "attempts"),
    ("demo.farm_instance", {**GOLD, "attempts": 1000}, "attempts"),
    ("demo.farm_instance", {"instance_type": "nowhere", "instance_name": "x"}, "allowed"),
    ("demo.farm_instance", {**GOLD, "then": "rm -rf /"}, "then"),
    ("demo.salvage_relics", {"rarity": 5}, "allowed: 2, 3, 4"),
    ("demo.farm_instance", {**GOLD, "instance_name": "藏" * 600_000}, "the limit is"),
    ("demo.nuke_everything", {}, "no task 'demo.nuke_everything' is available to mcp"),
    ("demo.loop_farm", {"rounds": [1] * 5_000}, "rounds"),
]


@pytest.mark.parametrize("mode", MODES)
def test_a_hostile_client_gets_clear_errors_and_nothing_runs(executor: Executor, mode: str) -> None:
    person = Person("accept")

    async def session() -> list[types.CallToolResult]:
        async with in_memory(executor, mode, person) as client:
            await started_game(client)
            return [await client.call_tool(name, args) for name, args, _ in HOSTILE]

    results = asyncio.run(session())
    for (name, _, says), result in zip(HOSTILE, results, strict=True):
        assert result.is_error, name
        assert says in text(result), (name, text(result)[:300])
    assert person.asked == []
    ran = [r for r in executor.store.list(limit=200) if r.task_id != "demo.start_game"]
    assert {r.status for r in ran} <= {TaskStatus.REJECTED, TaskStatus.NOT_FOUND}
    assert all(r.pid is None for r in ran)


@pytest.mark.parametrize("mode", MODES)
def test_a_background_job_answers_at_once_shows_its_progress_and_stops(executor: Executor, mode: str) -> None:
    async def session() -> tuple[types.CallToolResult, dict[str, Any], types.CallToolResult]:
        async with in_memory(executor, mode) as client:
            await started_game(client)
            started = await client.call_tool("demo.loop_farm", {})
            eid = started.structured_content["execution_id"]
            while True:  # until the worker's first report shows in the job's status (the test's deadline)
                status = await client.call_tool("jobs.status", {"execution_id": eid})
                if status.structured_content["data"].get("progress"):
                    break
                await asyncio.sleep(0.05)
            stopped = await client.call_tool("jobs.stop", {"execution_id": eid})
            return started, status.structured_content, stopped

    started, status, stopped = asyncio.run(asyncio.wait_for(session(), 60))
    assert not started.is_error and started.structured_content["status"] == "running"
    assert "jobs.stop" in text(started)
    assert status["status"] == "running" and "round" in status["data"]["progress"]["message"]
    # The stop worked, so the call is no error (found by the TypeScript client: it was flagged one).
    assert stopped.structured_content["status"] == "stopped" and not stopped.is_error
    assert status_of(executor, started.structured_content["execution_id"]) is TaskStatus.STOPPED


@pytest.mark.parametrize("mode", MODES)
def test_a_foreground_call_reports_progress_to_the_client(
    make_executor: Callable[..., Executor], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("TETHER_DEMO_STEP_S", "0.25")  # reports far enough apart to be seen one by one
    executor = make_executor()
    progress = Progress()

    async def session() -> types.CallToolResult:
        async with in_memory(executor, mode) as client:
            await started_game(client)
            return await client.call_tool(
                "demo.farm_instance", {**GOLD, "attempts": 4}, progress_callback=progress
            )

    result = asyncio.run(session())
    assert not result.is_error, text(result)
    values = [value for value, _, _ in progress.seen]
    assert values and values == sorted(set(values))  # each one further on than the last
    assert all(total == 100.0 for _, total, _ in progress.seen)
    assert any("attempt" in (message or "") for _, _, message in progress.seen)


@pytest.mark.parametrize("mode", MODES)
def test_a_cancelled_call_stops_its_job(
    make_executor: Callable[..., Executor], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("TETHER_DEMO_STEP_S", "0.5")
    executor = make_executor()
    progress = Progress()

    async def session() -> None:
        async with in_memory(executor, mode) as client:
            await started_game(client)
            call = asyncio.create_task(
                client.call_tool("demo.farm_instance", {**GOLD, "attempts": 99}, progress_callback=progress)
            )
            await progress.first.wait()  # the job runs (the test's deadline bounds this)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

    asyncio.run(asyncio.wait_for(session(), 60))
    farm = [r for r in executor.store.list(limit=20) if r.task_id == "demo.farm_instance"]
    assert len(farm) == 1
    wait_for(lambda: status_of(executor, farm[0].execution_id) is TaskStatus.STOPPED,
             what="the cancelled call's job to stop")  # fmt: skip


def test_jobs_of_tasks_not_exposed_to_mcp_are_not_found(support: Executor) -> None:
    """The same scoping as for any caller: mcp neither sees nor stops a job of a task it cannot run."""
    running = asyncio.run(support.execute("t.loops", {}, caller=CLI))
    assert running.status is TaskStatus.RUNNING

    async def session() -> list[types.CallToolResult]:
        async with in_memory(support, "auto") as client:
            return [
                await client.call_tool(name, {"execution_id": running.execution_id})
                for name in ("jobs.status", "jobs.stop")
            ]

    for result in asyncio.run(session()):
        assert result.is_error and result.structured_content["status"] == "not_found"
    assert support.jobs.status(running.execution_id).status is TaskStatus.RUNNING


@pytest.mark.parametrize("mode", MODES)
def test_a_client_whose_question_fails_runs_nothing(executor: Executor, mode: str) -> None:
    async def broken(context: Any, params: Any) -> types.ErrorData:
        return types.ErrorData(code=-32603, message="the dialog could not be shown")

    async def session() -> types.CallToolResult | Exception:
        async with Client(build_server(Bridge(executor)), mode=mode, elicitation_callback=broken) as client:
            await started_game(client)
            try:
                return await client.call_tool("demo.salvage_relics", {"rarity": 3})
            except MCPError as exc:  # 2026-07-28: the client's own driver gives up on the error
                return exc

    outcome = asyncio.run(session())
    if mode == "legacy":  # the server asked mid-call and got the error back: its refusal says so
        assert isinstance(outcome, types.CallToolResult) and outcome.is_error
        assert "could not ask" in text(outcome) and "nothing ran" in text(outcome)
    else:
        assert isinstance(outcome, MCPError)
    assert "completed" not in statuses(executor, "demo.salvage_relics")


def test_an_agents_grants_narrow_what_the_client_reaches(running_game: Executor) -> None:
    """``tether mcp serve --agent NAME``: the client sees and calls only the tasks within the agent's
    grants, and sees or stops only the jobs of those tasks (a job of another task is not found)."""
    from tether.store.agents import AgentRecord

    executor = running_game
    grants = AgentRecord(name="scout", grants=("demo.status", "demo.exit_game", "jobs")).effective_grants
    farming = asyncio.run(executor.execute("demo.loop_farm", {}, caller=CLI))
    assert farming.status is TaskStatus.RUNNING

    async def session() -> dict[str, Any]:
        async with Client(build_server(Bridge(executor, grants)), mode="auto") as client:
            return {
                "tools": {t.name for t in (await client.list_tools()).tools},
                "status": await client.call_tool("demo.status", {}),
                "salvage": await client.call_tool("demo.salvage_relics", {"rarity": 3}),
                "job": await client.call_tool("jobs.status", {"execution_id": farming.execution_id}),
                "stop": await client.call_tool("jobs.stop", {"execution_id": farming.execution_id}),
            }

    try:
        seen = asyncio.run(asyncio.wait_for(session(), 60))
    finally:
        asyncio.run(executor.control(farming.execution_id, "stop", caller=CLI))
    assert seen["tools"] == {"demo.status", "demo.exit_game", "jobs.status", "jobs.stop"}
    assert not seen["status"].is_error
    assert seen["salvage"].is_error and seen["salvage"].structured_content["status"] == "not_found"
    for answer in (seen["job"], seen["stop"]):
        assert answer.is_error and answer.structured_content["status"] == "not_found"
    ran = {
        r.task_id
        for r in executor.store.list(limit=50)
        if r.caller == MCP and r.status is TaskStatus.COMPLETED
    }
    assert ran == {"demo.status"}  # the refused call is on record, and nothing of it ran
