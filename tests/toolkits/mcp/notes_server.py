"""A small MCP server for the MCP toolkit's tests, written with the SDK's server API and started as a
real process: over stdio (``python notes_server.py``) or streamable HTTP on 127.0.0.1
(``python notes_server.py --http``: it prints its port, and with ``NOTES_EXPECT_TOKEN`` set answers
401 to a request without ``Authorization: Bearer <token>``).

Every call it runs is appended to ``$NOTES_LOG`` (one JSON line), so a test can tell what ran; the
names in ``$NOTES_ODD_NAMES`` are listed as tools too."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("notes")


def _ran(tool: str, **arguments: object) -> None:
    path = os.environ.get("NOTES_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"tool": tool, "arguments": arguments, "pid": os.getpid()}) + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(name: str, mode: Literal["short", "full"] = "short") -> str:
    """Read one note by its name."""
    _ran("read_note", name=name, mode=mode)
    return f"note {name} ({mode}): buy milk"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_note(name: str) -> str:
    """Delete one note for good."""
    _ran("delete_note", name=name)
    return f"deleted {name}"


@server.tool(name="countWords")
def count_words(text: str, limit: int = 100) -> dict[str, int]:
    """Count the words of a text (up to limit)."""
    _ran("countWords", text=text, limit=limit)
    return {"words": min(limit, len(text.split()))}


@server.tool()
def whoami() -> dict[str, object]:
    """What this server process can see: its pid, its environment's names, its token's digest."""
    _ran("whoami")
    token = os.environ.get("NOTES_TOKEN", "")
    return {
        "pid": os.getpid(),
        "env": sorted(os.environ),
        "token_sha256": hashlib.sha256(token.encode()).hexdigest() if token else None,
    }


@server.tool()
def wait(seconds: float = 600.0) -> str:
    """Block for a long time (a stop must end it), after saying it started."""
    _ran("wait", seconds=seconds)
    time.sleep(seconds)
    return "waited"


@server.tool()
async def summarize(parts: int, ctx: Context) -> str:
    """Work through some parts, saying how far it got after each."""
    _ran("summarize", parts=parts)
    for done in range(1, parts + 1):
        await ctx.report_progress(done, parts, f"part {done} of {parts}")
    return f"summarized {parts} parts"


@server.tool()
def crash() -> str:
    """Exit in the middle of the call, after a word on standard error."""
    _ran("crash")
    print("notes server: the disk is on fire", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
def fail() -> str:
    """A tool that answers an error."""
    raise ToolError("the note is locked")


@server.tool(name="read-file")
def read_file_dashed(path: str) -> str:
    """One of two tools whose names come out the same task id."""
    return path


@server.tool(name="read_file")
def read_file_plain(path: str) -> str:
    """The other one."""
    return path


# Tools whose names break the MCP rule ($NOTES_ODD_NAMES, a JSON list): the SDK only warns about them.
for _odd in json.loads(os.environ.get("NOTES_ODD_NAMES") or "[]"):
    server.add_tool(lambda: "odd", name=_odd, description="A tool whose name breaks the MCP rule.")


def _serve_http() -> None:
    import uvicorn

    app = server.streamable_http_app()
    expected = os.environ.get("NOTES_EXPECT_TOKEN")

    async def guarded(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
        if scope["type"] == "http" and expected:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {expected}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})  # type: ignore[operator]
                await send({"type": "http.response.body", "body": b"unauthorized"})  # type: ignore[operator]
                return
        await app(scope, receive, send)  # type: ignore[arg-type]

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if "--http" in sys.argv:
        _serve_http()
    else:
        server.run("stdio")
