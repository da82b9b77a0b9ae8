"""``tether mcp serve`` as a real process on stdio, as an MCP client starts it, driven by the SDK's
client through one scripted session: it lists the tools, calls one, is asked before a destructive call
(runs nothing after a decline, runs it once after an accept), starts a background job, sees its
progress and stops it, and follows a foreground call's progress."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from tests.interfaces.mcp.peers import GOLD, MODES, Person, Progress, stdio, text
from tests.support.helpers import FAST
from tether.execution.executor import Executor
from tether.tasks.callers import MCP
from tether.tasks.result import TaskStatus
from tether.toolkits.demo.registry import registry as demo


async def scripted(home: Path, mode: str, person: Person, progress: Progress) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with stdio(home, mode, person) as client:
        seen["version"] = client.protocol_version
        seen["tools"] = {t.name for t in (await client.list_tools()).tools}
        seen["start"] = await client.call_tool("demo.start_game", {})
        person.action = "decline"
        seen["declined"] = await client.call_tool("demo.salvage_relics", {"rarity": 3})
        person.action = "accept"
        seen["accepted"] = await client.call_tool("demo.salvage_relics", {"rarity": 3})
        loop = await client.call_tool("demo.loop_farm", {})
        seen["loop"] = loop
        eid = loop.structured_content["execution_id"]
        while True:  # until its first progress report shows (the test's deadline bounds this)
            status = await client.call_tool("jobs.status", {"execution_id": eid})
            if status.structured_content["data"].get("progress"):
                break
            await asyncio.sleep(0.05)
        seen["status"] = status
        seen["stop"] = await client.call_tool("jobs.stop", {"execution_id": eid})
        seen["farm"] = await client.call_tool(
            "demo.farm_instance", {**GOLD, "attempts": 6}, progress_callback=progress
        )
    return seen


@pytest.mark.parametrize("mode", MODES)
def test_a_scripted_session_over_stdio(home: Path, mode: str) -> None:
    person, progress = Person(), Progress()
    seen = asyncio.run(asyncio.wait_for(scripted(home, mode, person, progress), 120))

    assert seen["version"] == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert seen["tools"] == {spec.task_id for spec in demo.for_caller(MCP)}
    start = seen["start"]
    assert isinstance(start, types.CallToolResult) and not start.is_error
    declined, accepted = seen["declined"], seen["accepted"]
    assert isinstance(declined, types.CallToolResult) and declined.is_error
    assert "nothing ran" in text(declined)
    assert isinstance(accepted, types.CallToolResult) and not accepted.is_error, text(accepted)
    assert len(person.asked) == 2 and all('{"rarity": 3}' in q for q in person.asked)
    loop, status, stop = seen["loop"], seen["status"], seen["stop"]
    assert isinstance(loop, types.CallToolResult) and loop.structured_content["status"] == "running"
    assert isinstance(status, types.CallToolResult) and status.structured_content["status"] == "running"
    assert isinstance(stop, types.CallToolResult) and stop.structured_content["status"] == "stopped"
    farm = seen["farm"]
    assert isinstance(farm, types.CallToolResult) and not farm.is_error, text(farm)
    assert len(progress.seen) >= 2

    # The home's records: every call went through the executor as mcp; the salvage ran exactly once.
    with Executor(demo, home=home, settings=FAST) as executor:
        records = executor.store.list(limit=100)
    assert {r.caller for r in records} == {MCP}
    salvage = [r.status for r in records if r.task_id == "demo.salvage_relics"]
    assert salvage.count(TaskStatus.COMPLETED) == 1 and TaskStatus.RUNNING not in salvage
    assert next(r for r in records if r.task_id == "demo.loop_farm").status is TaskStatus.STOPPED
