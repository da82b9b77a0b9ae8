"""The tasks one home imports from its MCP servers, and ``mcp.refresh``: light, no MCP SDK.

``home_tasks(home)`` is the standard registry's ``homes`` function (``Registry.for_home``): for every
``[[mcp.servers]]`` entry, the tools of its kept list (``cache``) that the allowlist takes become
``mcp.<server>.<tool>`` tasks, each validated against the server's own schema (``schema``), with the
danger ``names.danger_of`` gives and the server's ``timeout_s``. It reads settings.toml and a few
small files: no server is started, no SDK imported. ``plan(home)`` says the same with the reasons,
tool by tool (``tether mcp tools``): left out by the allowlist, a name outside the MCP rule, a name
two tools share, an unusable schema, a stale or missing list.

Every imported task is exposed to the agent, the CLI and MCP clients, claims no resource (each call
has a server of its own, or an HTTP session of its own), and is ``available`` only where the MCP SDK
is installed. The workers of a server's tools get the variables that reach the OS keyring when the
server has secrets, and every worker of ``mcp.refresh`` gets them (one spec serves every server it may
list, so it cannot tell which has secrets); no other worker has them.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tether.config import McpSettings
from tether.tasks.callers import CLI
from tether.tasks.spec import EVERYONE, Danger, Registry, TaskSpec
from tether.toolkits.mcp import cache, names
from tether.toolkits.mcp.schema import SDK_MISSING, UnusableSchema, params_model
from tether.toolkits.mcp.servers import SERVER_NAME, McpServer, load_servers

H = "tether.toolkits.mcp.handlers:"
AVAILABLE = "tether.toolkits.mcp.specs:sdk_problem"
HOME_TASKS = "tether.toolkits.mcp.specs:home_tasks"
HOME_FILES = ("settings.toml", "mcp/tools")  # a change in either makes a home's imported tasks again
# What a worker needs to reach the OS keyring (the session bus on Linux; a chosen backend): given to the
# workers of the tools of a server that has secrets, and to every worker of mcp.refresh.
KEYRING_ENV = ("DBUS_SESSION_BUS_ADDRESS", "PYTHON_KEYRING_BACKEND")
TIMEOUT_GRACE_S = 10.0
# Warmed by the fork server while it is idle (``Registry.preload``): the worker of an imported tool or of
# mcp.refresh makes the tools' parameter models, which import jsonschema (about 0.15 s). A worker forked
# afterwards has it loaded; one that never needs it pays nothing (the fork shares the server's pages).
# Named only where it is installed (tether[mcp]), or every fork server would log a failed preload.
PRELOAD = ("jsonschema",) if importlib.util.find_spec("jsonschema") is not None else ()


def sdk_problem(home: Path) -> str | None:
    """Why imported tools cannot run here (the SDK is missing), else None; never imports it."""
    return SDK_MISSING if importlib.util.find_spec("mcp") is None else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """One tool a server listed, and what this home makes of it."""

    server: str
    name: str  # as the server spells it
    task_id: str  # "" for a name outside the MCP rule (``names.valid``)
    description: str = ""
    danger: Danger = Danger.CAUTION
    why_danger: str = ""
    spec: TaskSpec | None = None  # None: not imported, for ``skipped``
    skipped: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerPlan:
    server: McpServer
    listing: cache.Listing | None
    problem: str = ""  # why none of its tools is imported (never listed, stale, damaged)
    tools: list[Tool] = field(default_factory=list)


def plan(home: Path) -> list[ServerPlan]:
    """Every configured server with each tool it listed and what became of it."""
    return [server_plan(home, server) for server in load_servers(home).values()]


def home_tasks(home: Path) -> list[TaskSpec]:
    """The tasks ``home`` imports (``Registry.for_home``); [] at once when it configures no server."""
    if not McpSettings.load(home).servers:
        return []
    return [tool.spec for server in plan(home) for tool in server.tools if tool.spec is not None]


def locate(home: Path, task_id: str) -> tuple[McpServer, str]:
    """The server behind an imported task and the tool's own name there, for its worker (``KeyError``
    if there is none). Read from the kept list: the worker has checked the call against the task's
    parameters already, so no tool's model is made again."""
    _, server_name, _ = task_id.split(".", 2)
    server = load_servers(home)[server_name]
    listing = cache.read(home, server.name)
    if isinstance(listing, cache.Listing) and listing.fingerprint == server.fingerprint():
        for entry in listing.tools:
            name = str(entry["name"])
            if (
                names.valid(name)
                and names.task_id(server.name, name) == task_id
                and names.matches(name, server.tools)
            ):
                return server, name
    raise KeyError(task_id)


def server_plan(home: Path, server: McpServer) -> ServerPlan:
    """One server with each tool it listed and what became of it (``plan`` for one server)."""
    listing = cache.read(home, server.name)
    refresh = f"run `tether mcp tools {server.name} --refresh`"
    if listing is None:
        return ServerPlan(server=server, listing=None, problem=f"its tools were never listed: {refresh}")
    if isinstance(listing, str):
        return ServerPlan(server=server, listing=None, problem=listing)
    if listing.fingerprint != server.fingerprint():
        problem = f"its settings changed since its tools were listed: {refresh}"
        return ServerPlan(server=server, listing=listing, problem=problem)
    # A name outside the rule is left out before anything else: it may not take a task id from a
    # tool within it (``read note`` would make ``read_note`` a name two tools share).
    named = [entry for entry in listing.tools if names.valid(entry["name"])]
    allowed = [entry for entry in named if names.matches(entry["name"], server.tools)]
    ids = [names.task_id(server.name, entry["name"]) for entry in allowed]
    tools = [
        _tool(server, entry, shared=ids.count(names.task_id(server.name, entry["name"])) > 1)
        for entry in allowed
    ]
    taken = {entry["name"] for entry in allowed}
    tools += [
        Tool(
            server=server.name,
            name=entry["name"],
            task_id=names.task_id(server.name, entry["name"]),
            description=names.plain(str(entry.get("description") or "")),
            skipped="not in this server's tools allowlist",
        )
        for entry in named
        if entry["name"] not in taken
    ]
    tools += [
        Tool(server=server.name, name=names.shown(entry["name"]), task_id="", skipped=names.INVALID_NAME)
        for entry in listing.tools
        if not names.valid(entry["name"])
    ]
    return ServerPlan(server=server, listing=listing, tools=tools)


def _tool(server: McpServer, entry: dict[str, object], *, shared: bool) -> Tool:
    name = str(entry["name"])
    annotations = entry.get("annotations") if isinstance(entry.get("annotations"), dict) else {}
    task_id = names.task_id(server.name, name)
    danger, why = names.danger_of(
        name,
        annotations,  # type: ignore[arg-type]
        server.danger,
        trust_read_only=server.trust_read_only,
    )
    # A server we do not trust wrote these: plain (``names.plain``) before the model or a terminal sees them.
    title = names.plain(str(entry.get("title") or ""))
    description = names.plain(str(entry.get("description") or "")) or title
    base = Tool(
        server=server.name, name=name, task_id=task_id, description=description, danger=danger, why_danger=why
    )
    if shared:
        return _skip(base, f"another tool of {server.name!r} also becomes {task_id}: neither is imported")
    if entry.get("problem"):
        return _skip(base, str(entry["problem"]))
    try:
        params = params_model(task_id, name, entry.get("inputSchema"))
    except UnusableSchema as exc:
        return _skip(base, exc.message)
    read_only = names.hint(annotations, "readOnlyHint") and server.trust_read_only  # type: ignore[arg-type]
    spec = TaskSpec(
        task_id=task_id,
        handler=H + "call",
        params=params,
        description=f"{description} (the tool {name!r} of the MCP server {server.name!r})".lstrip(),
        aliases=tuple(dict.fromkeys(a for a in (name, title) if a)),
        resources=(),
        background=names.matches(name, server.background) is not None,
        danger=danger,
        idempotent=read_only and danger is Danger.SAFE,
        exposed_to=EVERYONE,
        # The handler's own limit says "did not answer within …"; the executor's is the backstop.
        timeout_s=server.timeout_s + TIMEOUT_GRACE_S,
        available=AVAILABLE,
        env=KEYRING_ENV if server.secret_names() else (),
        secrets=tuple(server.secret_names().values()),
    )
    return Tool(
        server=server.name, name=name, task_id=task_id, description=description, danger=danger,
        why_danger=why, spec=spec,
    )  # fmt: skip


def _skip(tool: Tool, why: str) -> Tool:
    return Tool(
        server=tool.server, name=tool.name, task_id=tool.task_id, description=tool.description,
        danger=tool.danger, why_danger=tool.why_danger, skipped=why,
    )  # fmt: skip


class RefreshParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: Annotated[
        str,
        Field(
            pattern=SERVER_NAME,
            description="the name of one [[mcp.servers]] entry",
            json_schema_extra={"labels": {"en": "server", "zh": "服务器"}},
        ),
    ]


def add_tasks(registry: Registry) -> None:
    """Add ``mcp.refresh`` (list one server's tools into the home's kept list) to ``registry``."""
    registry.add(
        TaskSpec(
            task_id="mcp.refresh",
            handler=H + "refresh",
            params=RefreshParams,
            description="Start or reach one configured MCP server, list its tools and keep the list "
            "(what `tether mcp tools --refresh` runs); the allowlist then picks what is imported.",
            aliases=("刷新 MCP 工具", "refresh mcp tools"),
            exposed_to=frozenset({CLI}),
            resources=(),
            danger=Danger.CAUTION,
            idempotent=True,
            available=AVAILABLE,
            env=KEYRING_ENV,
            secrets=("mcp.*",),  # any configured server's, as it reaches the keyring
        )
    )


registry = Registry(
    ref="tether.toolkits.mcp.specs:registry", preload=PRELOAD, homes=(HOME_TASKS,), home_files=HOME_FILES
)
add_tasks(registry)
