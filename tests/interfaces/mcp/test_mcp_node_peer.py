"""An independent MCP client: the TypeScript SDK's (``node/session.mjs``), sharing no code with the Python
SDK ``tether mcp serve`` is built on, runs one scripted session over stdio and over streamable HTTP: it
lists the tools, calls one, sends arguments of the wrong type, is asked before a destructive call (runs
nothing after a decline, runs it once after an accept), starts a background job, sees its progress and
stops it, follows a foreground call's progress and cancels a call, which stops its job.

Needs Node.js and the SDK installed by ``npm ci`` in ``node/`` (``.ci/run`` does both); elsewhere the
test is skipped and says so, unless ``TETHER_TEST_REQUIRE_NODE=1`` makes that a failure."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interfaces.mcp.peers import DEMO
from tests.support.helpers import FAST, ROOT, wait_for
from tether.execution.executor import Executor
from tether.tasks.callers import MCP
from tether.tasks.result import TaskStatus
from tether.toolkits.demo.registry import registry as demo

PEER = Path(__file__).with_name("node")
REQUIRED = os.environ.get("TETHER_TEST_REQUIRE_NODE") == "1"


def _node() -> str:
    node = shutil.which("node")
    problem = (
        "node is not installed" if node is None
        else None if (PEER / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir()
        else f"the TypeScript MCP SDK is not installed (npm ci --prefix {PEER})"
    )  # fmt: skip
    if problem is not None:
        if REQUIRED:
            pytest.fail(f"TETHER_TEST_REQUIRE_NODE=1 but {problem}")
        pytest.skip(f"NOT TESTED WITH THE TYPESCRIPT MCP CLIENT: {problem}")
    assert node is not None
    return node


@contextlib.contextmanager
def _session(args: list[str], env: dict[str, str]) -> Iterator[dict[str, Any]]:
    """What the client saw; it stays connected until the test is done looking (then exits 0)."""
    proc = subprocess.Popen(
        [_node(), str(PEER / "session.mjs"), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=PEER,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-3000:]
        yield json.loads(line)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def _check(seen: dict[str, Any], home: Path) -> None:
    assert {t["name"] for t in seen["tools"]} == {s.task_id for s in demo.for_caller(MCP)}
    salvage = next(t for t in seen["tools"] if t["name"] == "demo.salvage_relics")
    assert salvage["annotations"].get("destructiveHint") is True
    assert not seen["start"]["isError"]
    assert seen["bad"]["isError"] and "attempts" in seen["bad"]["text"]
    # Asked twice, each time naming the exact call; the decline ran nothing, the accept ran it once.
    assert seen["answers"] == ["decline", "accept"]
    assert all("demo.salvage_relics" in q and "3" in q for q in seen["asked"]), seen["asked"]
    assert seen["declined"]["isError"] and not seen["accepted"]["isError"]
    assert seen["loop"]["structured"]["status"] == "running"
    assert seen["status"]["structured"]["data"]["progress"]
    assert not seen["stop"]["isError"]
    assert seen["progress"] and not seen["farm"]["isError"]
    assert seen["cancelled"] != "finished"
    with Executor(demo, home=home, settings=FAST) as reader:

        def stopped_farm() -> bool:
            return any(
                r.task_id == "demo.farm_instance" and r.status is TaskStatus.STOPPED
                for r in reader.store.list(limit=50)
            )

        wait_for(stopped_farm, timeout=60, what="the cancelled call's job to stop")
        records = reader.store.list(limit=50)
    salvaged = [r.status for r in records if r.task_id == "demo.salvage_relics"]
    # Ran once; the other records are the calls that asked first (refused until the person answered).
    assert salvaged.count(TaskStatus.COMPLETED) == 1 and set(salvaged) <= {
        TaskStatus.COMPLETED,
        TaskStatus.REJECTED,
    }
    loops = [r for r in records if r.task_id == "demo.loop_farm"]
    assert [r.status for r in loops] == [TaskStatus.STOPPED]
    assert all(r.caller == MCP for r in records)


def test_the_typescript_client_over_stdio(home: Path) -> None:
    env = {
        **os.environ,
        "TETHER_HOME": str(home),
        "TETHER_REGISTRY": DEMO,
        "TETHER_STOP_GRACE_COOPERATIVE_S": "1",
        "TETHER_STOP_GRACE_INTERRUPT_S": "1",
    }
    with _session(["stdio", sys.executable, str(ROOT)], env) as seen:
        _check(seen, home)


def test_the_typescript_client_over_http(home: Path, served: tuple[str, str]) -> None:
    url, token = served
    with _session(["http", url, token], dict(os.environ)) as seen:
        _check(seen, home)
