"""``tether mcp serve`` as a real process on stdio, as an MCP client starts it, driven by the SDK's
client through one scripted session: it lists the tools, calls one, is asked before a destructive call
(runs nothing after a decline, runs it once after an accept), starts a background job, sees its
progress and stops it, follows a foreground call's progress, and cancels a call, which stops its job."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from tests.interfaces.mcp.peers import DEMO, GOLD, MODES, Person, Progress, stdio, text
from tests.support.helpers import FAST, ROOT
from tether.execution.executor import Executor
from tether.store.jobs import JobRecord
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
        seen["cancelled"] = await cancelled_farm(home, client)
    return seen


async def cancelled_farm(home: Path, client: Any) -> JobRecord:
    """A long farm cancelled by the client once it reports progress: its job, once stopped (the
    server still runs, so it was the cancellation that stopped it, not the server's end)."""
    begun = Progress()
    farming = asyncio.create_task(
        client.call_tool("demo.farm_instance", {**GOLD, "attempts": 99}, progress_callback=begun)
    )
    await begun.first.wait()
    farming.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await farming
    with Executor(demo, home=home, settings=FAST) as reader:
        while True:  # the test's deadline bounds this
            stopped = [r for r in reader.store.list(limit=50)
                       if r.task_id == "demo.farm_instance" and r.status is TaskStatus.STOPPED]  # fmt: skip
            if stopped:
                return stopped[0]
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("mode", MODES)
def test_a_scripted_session_over_stdio(home: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_DEMO_STEP_S", "0.25")  # a farm long enough to report progress on the way
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
    assert progress.seen and all(total == 100.0 for _, total, _ in progress.seen)
    assert "cancelled" in seen["cancelled"].message

    # The home's records: every call went through the executor as mcp; the salvage ran exactly once.
    with Executor(demo, home=home, settings=FAST) as executor:
        records = executor.store.list(limit=100)
    assert {r.caller for r in records} == {MCP}
    salvage = [r.status for r in records if r.task_id == "demo.salvage_relics"]
    assert salvage.count(TaskStatus.COMPLETED) == 1 and TaskStatus.RUNNING not in salvage
    assert next(r for r in records if r.task_id == "demo.loop_farm").status is TaskStatus.STOPPED


def test_a_hostile_peer_on_raw_stdio_gets_errors_and_nothing_runs(home: Path) -> None:
    """JSON-RPC written by hand: a line that is not JSON, arguments that are not an object, a tool that
    does not exist, a destructive call from a client that declared no elicitation. The server answers
    each (or drops the line), runs none of them, keeps serving, and exits 0 when stdin closes."""
    env = {**os.environ, "TETHER_HOME": str(home), "TETHER_REGISTRY": DEMO}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "mcp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    replies = proc.stdout

    def send(message: object) -> None:
        assert proc.stdin is not None
        proc.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        proc.stdin.flush()

    def answer(request_id: int) -> dict[str, Any]:
        """The response to ``request_id`` (notifications on the way are skipped; the deadline fails)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([replies], [], [], 0.2)
            if ready:
                message = json.loads(replies.readline())
                if message.get("id") == request_id:
                    return message
        pytest.fail(f"no answer to request {request_id}")

    def call(request_id: int, name: str, arguments: object) -> dict[str, Any]:
        send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
              "params": {"name": name, "arguments": arguments}})  # fmt: skip
        return answer(request_id)

    try:
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "h", "version": "0"},
        }
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        assert "result" in answer(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send("this is not json {")
        assert call(2, "demo.start_game", "a string")["error"]["code"] == -32602
        unknown = call(3, "rm -rf /", {})["result"]
        assert unknown["isError"] and unknown["structuredContent"]["status"] == "not_found"
        assert not call(4, "demo.start_game", {})["result"]["isError"]
        asked = call(5, "demo.salvage_relics", {"rarity": 3})["result"]
        assert asked["isError"] and "--confirm" in asked["content"][0]["text"]
        send({"jsonrpc": "2.0", "id": 6, "method": "tools/list"})
        assert {t["name"] for t in answer(6)["result"]["tools"]} == {s.task_id for s in demo.for_caller(MCP)}
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    with Executor(demo, home=home, settings=FAST) as executor:
        ran = {r.task_id: r.status for r in executor.store.list(limit=50) if r.status is TaskStatus.COMPLETED}
    assert ran == {"demo.start_game": TaskStatus.COMPLETED}
