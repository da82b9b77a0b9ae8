"""``tether serve`` (the web page) and the commands that give the CLI what the page can do:
``tether approvals`` (the questions waiting for a person) and ``tether events`` (the event log the
page streams).

The web app's modules (FastAPI, uvicorn) are imported only by ``tether serve``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from tether.interfaces.base import JsonFlag, app, guarded, registry, state
from tether.interfaces.render import err, out


@app.command("serve")
def serve_command(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (the page and the API need the token)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="0: any free port")] = 8765,
    open_page: Annotated[bool, typer.Option("--open", help="Open the page in your browser")] = False,
    max_streams: Annotated[
        int, typer.Option("--max-streams", min=1, max=10_000, help="Pages that may follow events at once")
    ] = 64,
) -> None:
    """Be this home's executor and serve the web page: talk to the agent, watch its steps live,
    approve, stop jobs, follow goal runs (Ctrl-C stops it)."""

    def body() -> int:
        import asyncio

        from tether.interfaces.web.server import serve
        from tether.runtime import Runtime

        def ready(url: str, facts: dict[str, Any]) -> None:
            out.print(f"tether serve: {url}", markup=False, soft_wrap=True)
            if facts.get("settled_turns"):
                err.print(f"{facts['settled_turns']} turn(s) left running by a crash are now interrupted")
            err.print("open that URL once: it keeps the token in a cookie (keep the URL private)")
            if open_page:
                import webbrowser

                from tether.interfaces.web.security import open_page_file

                # The browser gets an owner-only file that goes on to the URL: a URL with the token
                # on the browser's command line would be readable by every local user.
                webbrowser.open(open_page_file(runtime.home, url).as_uri())

        with Runtime.open(state.home) as runtime:
            try:
                asyncio.run(serve(runtime, registry(), host=host, port=port,
                                  on_ready=ready, max_subscribers=max_streams))  # fmt: skip
            except KeyboardInterrupt:
                pass
            except OSError as exc:
                from tether.errors import ConfigError

                raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
        out.print("tether serve stopped", markup=False)
        return 0

    guarded(False, body)


@app.command("approvals")
def approvals_command(as_json: JsonFlag = False) -> None:
    """The calls waiting for your confirmation, in every thread (answer with `tether run --thread ID
    --confirm`, or `"no"`)."""

    def body() -> int:
        from tether.runtime import Runtime
        from tether.supervisor import conversations

        with Runtime.open(state.home) as runtime:
            rows = conversations.questions(runtime)
        if as_json:
            print(json.dumps({"items": rows}, ensure_ascii=False))
            return 0
        if not rows:
            out.print("nothing waits for your confirmation", markup=False)
        for row in rows:
            args = json.dumps(row["args"], ensure_ascii=False)
            out.print(f"{row['thread_id']}  {row['danger'] or ''}  {row['tool']} {args}", markup=False)
            out.print(f'  tether run --thread {row["thread_id"]} --confirm   (or "no")', markup=False)
        return 0

    guarded(as_json, body)


@app.command("events")
def events_command(
    after: Annotated[int, typer.Option("--after", min=0, help="Only events after this id")] = 0,
    topic: Annotated[
        list[str] | None, typer.Option("--topic", help="thread:ID, run:ID or job:ID (repeatable)")
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 200,
) -> None:
    """The event log the web page streams, one JSON document per line (with --follow, until Ctrl-C)."""

    def body() -> int:
        import asyncio

        from tether.runtime import Runtime

        def show(event: Any) -> None:
            print(event.model_dump_json(), flush=True)

        with Runtime.open(state.home) as runtime:
            if not follow:
                for event in runtime.events.read(after, topics=topic, limit=limit):
                    show(event)
                return 0

            async def stream() -> None:
                async for event in runtime.events.stream(after, topics=topic):
                    show(event)

            try:
                asyncio.run(stream())
            except KeyboardInterrupt:
                pass
        return 0

    guarded(False, body)
