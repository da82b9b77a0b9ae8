"""``tether mcp serve``: this home's tasks for the caller ``mcp`` as an MCP server, over stdio (the
default: an MCP client starts it) or streamable HTTP (``--http``, behind ``tether serve``'s token and
Host checks).

The MCP SDK is imported only inside the command (it takes about 1.5 s): no other command pays for it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tether.interfaces.base import guarded, open_executor
from tether.interfaces.render import err, out

mcp_app = typer.Typer(help="Serve this home's tasks to MCP clients.", no_args_is_help=True)


@mcp_app.command("serve")
def mcp_serve(
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP at /mcp instead of stdio (needs the token)")
    ] = False,
    host: Annotated[str, typer.Option("--host", help="With --http: the address to listen on")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="With --http: 0 = any free port")
    ] = 8766,
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
            try:
                if http:
                    asyncio.run(mcp_server.serve_http(executor, host=host, port=port, on_ready=ready))
                else:
                    asyncio.run(mcp_server.serve_stdio(executor))
            except KeyboardInterrupt:
                pass
            except OSError as exc:
                if not http:
                    raise
                from tether.errors import ConfigError

                raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        return 0

    guarded(False, body)
