"""The MCP SDK's own client as the peer of ``tether mcp serve``: in memory (both protocol eras), over a
real stdio subprocess and over real HTTP on 127.0.0.1; with a person behind it who answers the
elicitation questions as a test says, and records what they were shown."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.helpers import ROOT
from tether.execution.executor import Executor
from tether.interfaces.mcp_server import Bridge, build_server

DEMO = "tether.toolkits.demo.registry:registry"
MODES = ("auto", "legacy")  # auto settles on 2026-07-28 (inline questions); legacy on the handshake era
GOLD = {"instance_type": "拟造花萼（金）", "instance_name": "藏珍之蕾"}


@dataclass
class Person:
    """Answers every question with ``action`` (accepting with ``confirm``), and keeps the questions."""

    action: Literal["accept", "decline", "cancel"] = "accept"
    confirm: bool = True
    asked: list[str] = field(default_factory=list)

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params.message)
        if self.action != "accept":
            return types.ElicitResult(action=self.action)
        return types.ElicitResult(action="accept", content={"confirm": self.confirm})


@dataclass
class Progress:
    """The progress notifications a call received."""

    seen: list[tuple[float, float | None, str | None]] = field(default_factory=list)
    first: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))
        self.first.set()


def in_memory(executor: Executor, mode: str, person: Person | None = None) -> Client:
    return Client(build_server(Bridge(executor)), mode=mode, elicitation_callback=person)


def stdio(home: Path, mode: str, person: Person | None = None, registry: str = DEMO) -> Client:
    env = {
        **os.environ,
        "TETHER_HOME": str(home),
        "TETHER_REGISTRY": registry,
        "TETHER_STOP_GRACE_COOPERATIVE_S": "1",
        "TETHER_STOP_GRACE_INTERRUPT_S": "1",
    }
    command = StdioServerParameters(
        command=sys.executable, args=["-m", "tether.interfaces.cli", "mcp", "serve"], env=env, cwd=str(ROOT)
    )
    return Client(command, mode=mode, elicitation_callback=person)


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
