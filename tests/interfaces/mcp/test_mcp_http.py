"""``tether mcp serve --http`` as a real process on 127.0.0.1: behind ``tether serve``'s own checks (the
home's token as a bearer, a loopback Host), then a real MCP session over streamable HTTP with it."""

from __future__ import annotations

import asyncio
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.interfaces.mcp.peers import DEMO, MODES, Person, text
from tests.support.helpers import ROOT
from tether.interfaces.web.security import token_path

URL_RE = re.compile(r"tether mcp serve: (http://\S+)")
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
ACCEPTS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _url(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """The URL the server prints once it serves (the test fails at the deadline)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            found = URL_RE.search(line)
            if found:
                return found.group(1)
    proc.kill()
    pytest.fail(f"tether mcp serve --http did not start: {proc.stderr.read() if proc.stderr else ''}")


@pytest.fixture
def served(home: Path) -> Iterator[tuple[str, str]]:
    """(the /mcp URL, the home's token) of a running ``tether mcp serve --http --port 0``."""
    env = {**os.environ, "TETHER_HOME": str(home), "TETHER_REGISTRY": DEMO}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "mcp", "serve", "--http", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        url = _url(proc)
        yield url, token_path(home).read_text().strip()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_a_request_without_the_token_or_from_another_host_is_refused(served: tuple[str, str]) -> None:
    url, token = served
    refused = [
        httpx.post(url, json=INITIALIZE, headers=ACCEPTS),
        httpx.post(url, json=INITIALIZE, headers={**ACCEPTS, "Authorization": "Bearer not-the-token"}),
        httpx.post(url, json=INITIALIZE, headers={**ACCEPTS, "Authorization": f"Basic {token}"}),
        httpx.get(url, headers={"Accept": "text/event-stream"}),
    ]
    assert [r.status_code for r in refused] == [401, 401, 401, 401]
    assert "token" in refused[0].json()["detail"]["message"]
    rebound = httpx.post(
        url, json=INITIALIZE, headers={**ACCEPTS, "Authorization": f"Bearer {token}", "Host": "evil.example"}
    )
    assert rebound.status_code == 421
    huge = {**INITIALIZE, "params": {**INITIALIZE["params"], "pad": "x" * 300_000}}
    too_large = httpx.post(url, json=huge, headers={**ACCEPTS, "Authorization": f"Bearer {token}"})
    assert too_large.status_code == 413
    welcome = httpx.post(url, json=INITIALIZE, headers={**ACCEPTS, "Authorization": f"Bearer {token}"})
    assert welcome.status_code == 200, welcome.text


@pytest.mark.parametrize("mode", MODES)
def test_a_session_over_http_with_the_token(served: tuple[str, str], mode: str) -> None:
    """In both eras (handshake era: the question is a server-to-client request on the call's stream)."""
    url, token = served
    person = Person("accept")

    async def session() -> tuple[set[str], types.CallToolResult, types.CallToolResult]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60.0)
        async with (
            http,
            Client(
                streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=person
            ) as c,
        ):
            tools = {t.name for t in (await c.list_tools()).tools}
            start = await c.call_tool("demo.start_game", {})
            salvage = await c.call_tool("demo.salvage_relics", {"rarity": 2})
            return tools, start, salvage

    tools, start, salvage = asyncio.run(asyncio.wait_for(session(), 90))
    assert {"demo.salvage_relics", "jobs.status", "jobs.stop"} <= tools
    assert not start.is_error, text(start)
    assert not salvage.is_error and salvage.structured_content["status"] == "completed", text(salvage)
    assert len(person.asked) == 1


def test_an_http_client_without_the_token_gets_no_session(served: tuple[str, str]) -> None:
    url, _ = served

    async def session() -> None:
        async with Client(url) as client:
            await client.list_tools()

    with pytest.raises(ExceptionGroup) as refused:  # the SDK's client fails on the 401 (without saying so)
        asyncio.run(asyncio.wait_for(session(), 60))
    assert refused.group_contains(MCPError)
