"""The handlers of imported MCP tools and of ``mcp.refresh``: they run only in workers.

``call`` holds one client session for one call: it starts (or reaches) the server, calls the tool
with the validated arguments, and answers the tool's text (clipped) with its structured content as
data. A tool that answers ``isError`` fails the task with its own words; a server that cannot be
started, exits or speaks garbage fails it with what happened and the last lines of its standard
error; a stop cancels the call and ends the server before the worker reports ``stopped``.

``refresh`` lists a server's tools (every page) within ``[mcp].discovery_timeout_s`` and keeps them
in the home (``cache``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tether.config import McpSettings
from tether.errors import CredentialError, StopRequested, TaskFailed
from tether.tasks.context import TaskContext
from tether.toolkits.mcp import cache, client, specs
from tether.toolkits.mcp.servers import McpServer, load_servers

MAX_TEXT_CHARS = 20_000  # of a tool's text kept in the result
STOP_POLL_S = 0.1
T = TypeVar("T")


def call(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    try:
        server, name = specs.locate(ctx.home, ctx.task_id)
    except KeyError:
        raise TaskFailed(f"{ctx.task_id} is no longer imported by this home's settings") from None
    arguments = ctx.params.model_dump(mode="json") if ctx.params is not None else {}
    ctx.log.info("calling %s on the MCP server %s", name, server.name)

    async def work(session: Any) -> Any:
        async def progress(done: float, total: float | None, message: str | None) -> None:
            ctx.progress(done / total if total else None, message or "")

        return await session.call_tool(name, arguments, progress_callback=progress)

    result = _run(ctx, server, work, server.timeout_s, f"calling {name!r}")
    return _answer(server, name, result)


def refresh(ctx: TaskContext) -> tuple[str, dict[str, Any]]:
    params = ctx.params.model_dump(mode="json") if ctx.params is not None else {}
    name = str(params.get("server", ""))
    servers = load_servers(ctx.home)
    server = servers.get(name)
    if server is None:
        known = ", ".join(sorted(servers)) or "none"
        raise TaskFailed(
            f"no [[mcp.servers]] entry is named {name!r}; configured: {known}", allowed=sorted(servers)
        )
    timeout = McpSettings.load(ctx.home).discovery_timeout_s

    async def work(session: Any) -> tuple[list[Any], Any]:
        tools: list[Any] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor or len(tools) > cache.MAX_TOOLS:
                return tools, session.server_info

    tools, info = _run(ctx, server, work, timeout, "listing its tools")
    entries = [
        cache.tool_entry(
            tool.name,
            getattr(tool, "title", None),
            tool.description,
            tool.input_schema,
            tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {},
        )
        for tool in tools[: cache.MAX_TOOLS]
    ]
    shown = info.model_dump(mode="json", exclude_none=True) if info is not None else {}
    listing = cache.Listing(
        server=server.name, fingerprint=server.fingerprint(), listed_at=cache.now(), server_info=shown,
        tools=tuple(entries), dropped=max(0, len(tools) - cache.MAX_TOOLS),
    )  # fmt: skip
    cache.write(ctx.home, listing)
    imported = [tool.task_id for tool in specs.server_plan(ctx.home, server).tools if tool.spec]
    message = f"{server.name}: {len(entries)} tools listed; imported: {', '.join(imported) or 'none'}"
    return message, {"server": server.name, "listed": [e["name"] for e in entries], "imported": imported}


def _run(
    ctx: TaskContext, server: McpServer, work: Callable[[Any], Awaitable[T]], timeout: float, doing: str
) -> T:
    """``work(session)`` on a session with ``server``, within ``timeout`` and until a stop; every way it
    can go wrong as ``TaskFailed`` (or ``StopRequested``) with the server's own last words."""
    try:
        secrets = client.secrets_of(server)
    except CredentialError as exc:  # a keyring that cannot be read says why
        raise TaskFailed(f"the MCP server {server.name!r}: {exc.message}") from exc
    faults = client.Faults()
    with client.server_log() as log:
        try:
            return asyncio.run(_session_work(ctx, server, secrets, log, faults, work, timeout))
        except (TaskFailed, StopRequested):
            raise
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            said = client.tail(log)
            reason = _reason(exc)
            if faults.http_status is not None:
                reason = f"it answered HTTP {faults.http_status}"
                if faults.http_status in (401, 403) and server.secret_headers:
                    entries = ", ".join(f"`tether auth set {e}`" for e in server.secret_names().values())
                    reason += f" (is its secret header right? {entries})"
            ctx.log.warning("the MCP server %s failed while %s: %s", server.name, doing, reason)
            if said:
                ctx.log.warning("its standard error ends with:\n%s", said)
            heard = f"; it said: {said[-500:]}" if said else ""
            raise TaskFailed(
                f"the MCP server {server.name!r} failed while {doing}: {reason}{heard}",
                server=server.name,
            ) from None


async def _session_work(
    ctx: TaskContext,
    server: McpServer,
    secrets: dict[str, str],
    log: Any,
    faults: client.Faults,
    work: Callable[[Any], Awaitable[T]],
    limit_s: float,
) -> T:
    async def in_session() -> T:
        async with client.session(server, secrets, log, faults) as session:
            return await work(session)

    task = asyncio.ensure_future(asyncio.wait_for(in_session(), limit_s))
    while not task.done():
        await asyncio.wait({task}, timeout=STOP_POLL_S)
        stop = ctx.should_stop()
        if not task.done() and (stop or faults.first is not None):
            if stop:
                client.end_servers()
            task.cancel()  # the session's exit ends the server (its shutdown is shielded)
            with _quiet():
                await task
            ctx.check_stop()
            raise TaskFailed(f"the MCP server {server.name!r} {faults.said()}")
    try:
        return task.result()
    except TimeoutError:
        raise TaskFailed(f"the MCP server {server.name!r} did not answer within {limit_s:g} s") from None


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, value: Any, tb: Any) -> bool:
        return (
            kind is not None and issubclass(kind, BaseException) and not issubclass(kind, KeyboardInterrupt)
        )


def _reason(exc: BaseException) -> str:
    """The innermost cause in a few words (the SDK wraps a closed connection in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    if "Connection closed" in text:
        return "the connection closed (the server exited or crashed)"
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


def _answer(server: McpServer, tool_name: str, result: Any) -> tuple[str, dict[str, Any]]:
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    for part in result.content:
        kind = getattr(part, "type", "")
        if kind == "text":
            texts.append(part.text)
        else:  # an image, audio or a resource: said, not copied into the record
            others.append({"type": kind, "mime_type": getattr(part, "mime_type", None)})
    text = "\n".join(texts)
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + f"… [{len(text) - MAX_TEXT_CHARS} more characters]"
    if result.is_error:
        raise TaskFailed(
            f"{server.name}.{tool_name} answered an error: {text or 'no text'}", server=server.name
        )
    data: dict[str, Any] = {"server": server.name, "tool": tool_name}
    if result.structured_content is not None:
        encoded = json.dumps(result.structured_content, ensure_ascii=False, default=str)
        data["structured"] = result.structured_content if len(encoded) <= MAX_TEXT_CHARS else None
    if others:
        data["other_content"] = others
    return text or "(the tool returned no text)", data
