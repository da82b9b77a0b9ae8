"""``tether mcp serve --http`` as a real process on 127.0.0.1: behind ``tether serve``'s own checks (the
home's token as a bearer, a loopback Host), then a real MCP session over streamable HTTP with it."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.interfaces.mcp.peers import MODES, Person, text

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
