"""A client session with one configured MCP server, inside the worker of one call or refresh: the MCP
SDK's client is imported here and only here (about 1.5 s), so no command, agent or server process pays
for it (``tether mcp serve`` imports the SDK's server side, for itself).

A ``command`` server is started over stdio as the worker's child, with an environment of the basics,
its plain ``env`` and its secrets, nothing else of the worker's; it ends with the session (the SDK
closes its stdin, then ends its process tree), and a stop that reaches the worker ends it too (the
worker is its subreaper; the stop's last step kills every descendant). A ``url`` server is spoken to
over streamable HTTP with its secret headers. Its standard error is kept: the last lines are quoted
when it fails, any secret taken out.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any, TextIO, cast

from tether.credentials import scrub
from tether.errors import TaskFailed
from tether.toolkits.mcp.servers import McpServer, stored_secrets

STDERR_TAIL_CHARS = 1500


def secrets_of(server: McpServer) -> dict[str, str]:
    """Each secret of ``server`` (variable or header → value) from the keyring, or handed to this worker
    by its starter from the secret's own variable; ``TaskFailed`` naming every missing one and the
    command that stores it."""
    stored = stored_secrets(server)
    missing = [name for name, value in stored.items() if value is None]
    if missing:
        entries = server.secret_names()
        said = ", ".join(f"{name} (`tether auth set {entries[name]}`)" for name in missing)
        raise TaskFailed(
            f"the MCP server {server.name!r} needs secrets that are not stored: {said}",
            missing=missing,
        )
    return {name: value for name, value in stored.items() if value is not None}


def _target(server: McpServer, secrets: dict[str, str], faults: Faults | None) -> Any:
    from mcp.client.stdio import StdioServerParameters

    if server.url:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = {name: secrets[name] for name in server.secret_headers}
        http = create_mcp_http_client(headers=headers)
        if faults is not None:
            http.event_hooks["response"].append(faults.on_response)
        return streamable_http_client(server.url, http_client=http)
    cwd = os.path.expanduser(server.cwd) if server.cwd else None
    if cwd is not None and not Path(cwd).is_dir():
        raise TaskFailed(f"the MCP server {server.name!r}: cwd {server.cwd!r} is not a folder")
    env = {**server.env, **{name: secrets[name] for name in server.secret_env}}
    return StdioServerParameters(command=server.command, args=list(server.args), env=env, cwd=cwd)


class Faults:
    """What the transport could not read (a server writing something that is not JSON-RPC): the SDK
    hands it to the client's message handler and goes on waiting; the handler ends the call instead."""

    def __init__(self) -> None:
        self.first: BaseException | None = None
        self.http_status: int | None = None  # the last HTTP error a URL server answered (the SDK drops it)

    async def on_response(self, response: Any) -> None:
        if response.status_code >= 400:
            self.http_status = response.status_code

    async def __call__(self, message: Any) -> None:
        if isinstance(message, Exception) and self.first is None:
            self.first = message

    def said(self) -> str:
        """What went wrong, after "the MCP server 'x'"."""
        text = " ".join(scrub(str(self.first)).split())
        text = text if len(text) <= 300 else text[:300] + "…"
        if isinstance(self.first, ValueError):  # pydantic's ValidationError too: a line that is not JSON-RPC
            return f"wrote something that is not MCP (JSON-RPC): {text}"
        return f"could not be read: {type(self.first).__name__}: {text}"


@contextlib.asynccontextmanager
async def session(
    server: McpServer, secrets: dict[str, str], errlog: IO[str], faults: Faults | None = None
) -> AsyncIterator[Any]:
    """An initialized ``mcp.Client`` on ``server``; ``TaskFailed`` when it cannot be started or reached."""
    from importlib.metadata import PackageNotFoundError, version

    from mcp import Client
    from mcp.client.stdio import stdio_client
    from mcp_types import Implementation

    try:
        __version__ = version("tether")
    except PackageNotFoundError:
        __version__ = "0"
    target = _target(server, secrets, faults)
    if not server.url:
        target = stdio_client(target, errlog=cast(TextIO, errlog))
    client = Client(
        target, client_info=Implementation(name="tether", version=__version__), message_handler=faults
    )
    try:
        entered = await client.__aenter__()
    except OSError as exc:
        raise TaskFailed(f"cannot start the MCP server {server.name!r}: {exc.strerror or exc}") from exc
    try:
        yield entered
    finally:
        await client.__aexit__(None, None, None)


def end_servers() -> int:
    """End the server processes this worker started, at once (SIGTERM to each one's process group, where
    the SDK starts it; terminate on Windows): a stop must not wait out the SDK's graceful shutdown,
    which gives a server seconds to notice its closed stdin. How many there were."""
    import signal

    import psutil

    children = psutil.Process().children()
    for child in children:
        with contextlib.suppress(psutil.Error, OSError):
            if os.name == "posix" and os.getpgid(child.pid) == child.pid:
                os.killpg(child.pid, signal.SIGTERM)
            else:
                child.terminate()
    return len(children)


@contextlib.contextmanager
def server_log() -> Any:
    """A file for the server's standard error (a pipe nobody reads could fill and stall it)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        yield log


def tail(log: IO[str]) -> str:
    """The last lines the server wrote to standard error, secrets taken out ("" when it wrote none)."""
    try:
        log.flush()
        log.seek(0)
        text = log.read()
    except (OSError, ValueError):
        return ""
    text = scrub(text.strip())
    return text[-STDERR_TAIL_CHARS:]
