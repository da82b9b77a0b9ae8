"""``tether mcp serve``: this home's tasks for the caller ``mcp`` as an MCP server, over stdio (the
default: an MCP client starts it) or streamable HTTP (``--http``, behind ``tether serve``'s token and
Host checks). ``tether mcp tools``: the tools of the MCP servers this home configures, and which of
them it imports (``--refresh`` lists them anew, through the executor: the ``mcp.refresh`` task).

The MCP SDK (about 1.5 s to import) is imported only by ``serve`` and by workers: the refresh's, and
the worker of every call of an imported tool. No other command, and no other worker, pays for it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from tether.interfaces.base import JsonFlag, guarded, open_executor
from tether.interfaces.render import err, out, print_result, visible

if TYPE_CHECKING:
    from tether.tasks.result import TaskResult

mcp_app = typer.Typer(
    help="Serve this home's tasks to MCP clients, and import tools from other MCP servers.",
    no_args_is_help=True,
)


@mcp_app.command("serve")
def mcp_serve(
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP at /mcp instead of stdio (needs the token)")
    ] = False,
    host: Annotated[str, typer.Option("--host", help="With --http: the address to listen on")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="With --http: 0 = any free port")
    ] = 8766,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="Serve only the tasks within this agent's grants (tether agents list)"),
    ] = None,
) -> None:
    """Serve the tasks exposed to the caller mcp as MCP tools; every call goes through the executor
    (destructive calls ask you through the client first). Stdio by default; Ctrl-C stops it."""

    def body() -> int:
        import asyncio

        try:
            from tether.interfaces import mcp_server
        except ImportError as exc:
            from tether.errors import ConfigError

            raise ConfigError(
                f"tether mcp needs the MCP SDK: pip install 'tether[mcp]' ({exc.name or exc} is missing)"
            ) from exc

        def ready(url: str, token_file: str) -> None:
            out.print(f"tether mcp serve: {url}", markup=False, soft_wrap=True)
            err.print(f"send the token as a bearer: Authorization: Bearer $(cat {token_file})", markup=False)

        with open_executor() as executor:
            grants = None
            if agent is not None:
                from tether.errors import ConfigError

                record = executor.runtime.agents.get(agent)
                if record is None:
                    names = ", ".join(a.name for a in executor.runtime.agents.list())
                    raise ConfigError(f"no agent {agent!r}; agents: {names}")
                grants = record.effective_grants
            try:
                if http:
                    asyncio.run(
                        mcp_server.serve_http(executor, host=host, port=port, on_ready=ready, grants=grants)
                    )
                else:
                    asyncio.run(mcp_server.serve_stdio(executor, grants))
            except KeyboardInterrupt:
                pass
            except OSError as exc:
                if not http:
                    raise
                from tether.errors import ConfigError

                raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        return 0

    guarded(False, body)


@mcp_app.command("tools")
def mcp_tools(
    server: Annotated[
        str | None, typer.Argument(help="One [[mcp.servers]] entry (default: every one)")
    ] = None,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Start or reach the server(s) and list their tools anew")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """The tools of the MCP servers in settings.toml ([[mcp.servers]]): which become mcp.SERVER.TOOL
    tasks (the allowlist, their danger and why), which do not and why. --refresh asks the servers again
    (a job like any task); otherwise the list kept from the last refresh is shown and nothing starts."""

    def body() -> int:
        from tether.errors import ConfigError
        from tether.tasks.callers import CLI
        from tether.toolkits.mcp import specs
        from tether.toolkits.mcp.servers import load_servers

        with open_executor() as executor:
            servers = load_servers(executor.home)
            if server is not None and server not in servers:
                known = ", ".join(servers) or "none (add [[mcp.servers]] to settings.toml)"
                raise ConfigError(f"no [[mcp.servers]] entry is named {server!r}; configured: {known}")
            chosen = [servers[server]] if server is not None else list(servers.values())
            code = 0
            refreshed: dict[str, TaskResult] = {}
            if refresh:
                for each in chosen:
                    result = executor.execute_sync("mcp.refresh", {"server": each.name}, caller=CLI)
                    refreshed[each.name] = result
                    if result.status.value != "completed":
                        code = 1
                        if not as_json:
                            print_result(result, err)
            plans = [specs.server_plan(executor.home, each) for each in chosen]  # after the refresh
            missing_sdk = specs.sdk_problem(executor.home)
        documents = [_plan_document(plan, refreshed.get(plan.server.name)) for plan in plans]
        if as_json:
            print(json.dumps({"servers": documents, "sdk_problem": missing_sdk}, ensure_ascii=False))
        else:
            _show(documents, missing_sdk)
        return code

    guarded(as_json, body)


def _plan_document(plan: Any, refreshed: TaskResult | None) -> dict[str, Any]:
    """One server as ``--json`` gives it; ``refresh`` is how its refresh ended (None when not asked):
    a failed one leaves the list kept before, which a script must be able to tell."""
    from tether.toolkits.mcp.servers import stored_secrets

    stored = stored_secrets(plan.server)
    secrets = {
        name: {"keyring": entry, "stored": stored[name] is not None}
        for name, entry in plan.server.secret_names().items()
    }
    outcome = None
    if refreshed is not None:
        outcome = {
            "status": refreshed.status.value,
            # What the server wrote to its standard error may be in it: shown, never acted on.
            "message": visible(refreshed.message),
            "execution_id": refreshed.execution_id,
        }
    listing = plan.listing
    return {
        "server": plan.server.name,
        "transport": plan.server.transport,
        "listed_at": listing.listed_at if listing is not None else None,
        "problem": plan.problem or None,
        "secrets": secrets,
        "refresh": outcome,
        "tools": [
            {
                "name": tool.name,
                "task_id": tool.task_id or None,  # a name outside the MCP rule has none
                "imported": tool.spec is not None,
                "danger": tool.danger.value if tool.spec is not None else None,
                "why": tool.why_danger if tool.spec is not None else tool.skipped,
            }
            for tool in plan.tools
        ],
    }


def _show(documents: list[dict[str, Any]], missing_sdk: str | None) -> None:
    from tether.interfaces.render import human_time

    if not documents:
        out.print("no MCP servers are configured: add [[mcp.servers]] to settings.toml (see the README)")
    for document in documents:
        when = human_time(document["listed_at"]) if document["listed_at"] else "never"
        out.print(f"[bold]{escape(document['server'])}[/] ({document['transport']}; listed {escape(when)})")
        if document["problem"]:
            out.print(f"  [yellow]{escape(document['problem'])}[/]")
        for name, secret in document["secrets"].items():
            if not secret["stored"]:
                out.print(
                    f"  [red]secret {escape(name)} is not stored[/]: tether auth set {secret['keyring']}"
                )
        for tool in document["tools"]:
            if tool["imported"]:
                out.print(
                    f"  [green]{escape(tool['task_id'])}[/]  {tool['danger']}  [dim]{escape(tool['why'])}[/]"
                )
            else:
                out.print(f"  [dim]{escape(tool['name'])}: not imported ({escape(tool['why'])})[/]")
    if missing_sdk and documents:
        out.print(f"[red]{escape(missing_sdk)}[/]")
