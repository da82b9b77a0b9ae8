"""``tether mcp serve`` traced as ``[telemetry]`` says: each call is a ``tools/call {tool}`` span after
the GenAI conventions for MCP servers, under the client's span when its request carries a
``traceparent`` in ``_meta``, with the worker's span under it, at a real OTLP/HTTP receiver."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.interfaces.mcp.peers import DEMO
from tests.support.helpers import ROOT, wait_for
from tests.support.otlp import Receiver

pytest.importorskip("opentelemetry.sdk")
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


class RawClient:
    """A client writing JSON-RPC to ``tether mcp serve``'s stdin by hand (it can send any ``_meta``)."""

    def __init__(self, home: Path) -> None:
        env = {**os.environ, "TETHER_HOME": str(home), "TETHER_REGISTRY": DEMO, "TETHER_CLI_SERVER": "0"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether.interfaces.cli", "mcp", "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, cwd=ROOT,
        )  # fmt: skip
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                answer = json.loads(self.proc.stdout.readline())
                if answer.get("id") == self.next_id:
                    return answer
        pytest.fail(f"no answer to {method}")

    def notify(self, method: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.proc.stdin.flush()

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()


def test_each_mcp_call_is_a_span_under_the_clients_with_its_worker_under_it(
    home: Path, receiver: Receiver
) -> None:
    """Audit: `tether mcp serve` never configured telemetry, so an operator tracing with OTLP saw
    nothing of the calls MCP clients made."""
    (home / "settings.toml").write_text(
        f'[telemetry]\nexporter = "otlp"\notlp_endpoint = "{receiver.url}"\nservice_name = "tether-mcp"\n',
        encoding="utf-8",
    )
    client = RawClient(home)
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    assert "result" in client.request("initialize", hello)
    client.notify("notifications/initialized")
    meta = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    started = client.request("tools/call", {"name": "demo.start_game", "arguments": {}, "_meta": meta})
    assert not started.get("result", {}).get("isError", True), started
    unknown = client.request("tools/call", {"name": "demo.nothing", "arguments": {}})
    assert unknown["result"]["isError"]
    assert client.close() == 0

    def arrived() -> list[dict[str, Any]] | None:
        names = {s["name"] for s in receiver.spans}
        wanted = {"tools/call demo.start_game", "tether.worker demo.start_game", "tools/call demo.nothing"}
        return receiver.spans if wanted <= names else None

    spans = wait_for(arrived, timeout=30, what="the calls' spans and the worker's at the receiver")
    call = next(s for s in spans if s["name"] == "tools/call demo.start_game")
    worker = next(s for s in spans if s["name"] == "tether.worker demo.start_game")
    assert (call["trace"], call["parent"]) == (CLIENT_TRACE, CLIENT_SPAN)  # under the client's span
    assert (worker["trace"], worker["parent"]) == (CLIENT_TRACE, call["id"])
    attributes = call["attributes"]
    assert (
        attributes["mcp.method.name"] == "tools/call" and attributes["gen_ai.tool.name"] == "demo.start_game"
    )
    assert attributes["gen_ai.operation.name"] == "execute_tool" and attributes["jsonrpc.request.id"] == "2"
    assert attributes["tether.task.status"] == "completed"
    assert attributes["tether.execution.id"] == worker["attributes"]["tether.execution.id"]
    refused = next(s for s in spans if s["name"] == "tools/call demo.nothing")
    assert refused["parent"] is None and refused["trace"] != CLIENT_TRACE  # a root of its own
    assert refused["attributes"]["tether.task.status"] == "not_found"
    assert refused["attributes"]["error.type"] == "tool_error"
    assert {s["service"] for s in spans} == {"tether-mcp"}
