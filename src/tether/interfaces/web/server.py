"""``tether serve``: one process that is the home's executor and serves the web page.

It launches the supervisor's engine (so turns handed over from the page, from ``tether run`` and from
goal runs execute here, durably), settles the turns a crash left running, relays workers' progress into
the event log, and serves the app (``app.py``) with uvicorn on the same event loop, through a protocol
that bounds what a client may hold (``protocol.py``, ``[web]`` settings).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import Any

from tether.config import WebSettings
from tether.errors import ConfigError
from tether.interfaces.web import security
from tether.interfaces.web.protocol import Limits, protocol_for
from tether.runtime import Runtime
from tether.tasks.spec import Registry

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
EVENTS_PATH = "/api/events"
STREAM_HEADROOM = 16  # connections kept for the API beyond the event streams
FILES_BESIDES_CONNECTIONS = 1024  # the store, DBOS, workers' pipes and logs


class _CancelledByPerson(logging.Filter):
    """A turn the person cancelled (the page's Cancel, a deleted thread) ends its workflow as cancelled,
    which DBOS logs as an error with a traceback in the terminal of ``tether serve``: it is not one."""

    CANCELLED = frozenset({"DBOSWorkflowCancelledError", "DBOSAwaitedWorkflowCancelledError"})

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return error is None or type(error).__name__ not in self.CANCELLED


def _quiet_cancellations() -> None:
    dbos = logging.getLogger("dbos")
    if not any(isinstance(f, _CancelledByPerson) for f in dbos.filters):
        dbos.addFilter(_CancelledByPerson())


def _allow_open_files(connections: int) -> None:
    """Raise the soft limit on open files to fit ``connections`` (a default of 1024 would run out first,
    and then the listening socket stops accepting anyone)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + FILES_BESIDES_CONNECTIONS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: any free port); ``OSError`` says why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only when the listening
    # socket says so, and without it a keep-alive response in two writes waits 40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def page_url(host: str, port: int, token: str) -> str:
    """The URL that logs a browser in (it sets the token's cookie, then drops the token from the URL)."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/?token={token}"


async def serve(
    runtime: Runtime,
    registry: Registry,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    on_ready: Callable[[str, dict[str, Any]], None] | None = None,
    max_subscribers: int = 64,
) -> None:
    """Serve until interrupted (SIGINT or SIGTERM end it gracefully)."""
    from tether.execution.executor import Executor
    from tether.execution.progress import ProgressRelay
    from tether.interfaces.web.app import create_app
    from tether.interfaces.web.context import WebContext
    from tether.models.factory import resolve
    from tether.supervisor import conversations, durable, engine
    from tether.supervisor.runner import models_of

    settings = WebSettings.load(runtime.home)
    if max_subscribers + STREAM_HEADROOM > settings.max_connections:
        raise ConfigError(
            f"--max-streams {max_subscribers} leaves too few of the {settings.max_connections} connections "
            f"[web] max_connections allows for anything else: keep it at most "
            f"{settings.max_connections - STREAM_HEADROOM}, or raise max_connections"
        )
    _allow_open_files(settings.max_connections)
    _quiet_cancellations()
    limits = _limits(settings)
    loopback = security.is_loopback(host.strip("[]"))
    token = security.load_or_create_token(runtime.home)  # on loopback too: see security.py
    policy = security.Policy(token=token, loopback=loopback)
    choice = resolve(runtime.home, runtime.model_settings)
    sock = bind(host, port)
    with Executor(registry, runtime=runtime) as executor:
        await asyncio.to_thread(executor.maintain)
        launched = await engine.launch(runtime, executor, model_for=models_of(runtime))
        try:
            with durable.client(runtime) as client:
                settled = await asyncio.to_thread(conversations.settle_orphans, runtime, client)
                ctx = WebContext(
                    runtime=runtime,
                    registry=registry,
                    executor=executor,
                    client=client,
                    policy=policy,
                    model_label=choice.label,
                    executor_id=launched.slot.executor_id if launched.slot else "",
                    max_subscribers=max_subscribers,
                    offline=choice.provider == "offline",
                    background=[ProgressRelay(runtime).run()],
                )

                def ready(bound: int) -> None:
                    if on_ready is not None:
                        url = page_url(host, bound, token)
                        on_ready(url, {"port": bound, "settled_turns": len(settled), "model": choice.label})

                await run_uvicorn(create_app(ctx), limits, sock, ready)
        finally:
            engine.shutdown()
            sock.close()


def _limits(settings: WebSettings) -> Limits:
    return Limits(
        head_timeout_s=settings.request_head_timeout_s,
        body_timeout_s=settings.request_body_timeout_s,
        stall_timeout_s=settings.send_stall_timeout_s,
        max_connections=settings.max_connections,
        stream_paths=(EVENTS_PATH,),
    )


async def run_uvicorn(app: Any, limits: Limits, sock: socket.socket, ready: Callable[[int], None]) -> None:
    """Serve ``app`` on ``sock`` until uvicorn ends; ``ready`` gets the bound port once it serves."""
    import uvicorn

    config = uvicorn.Config(
        app,
        http=protocol_for(limits),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
        ws="none",
    )
    server = uvicorn.Server(config)
    bound = sock.getsockname()[1]

    async def announce() -> None:
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for it
            await asyncio.sleep(0.01)
        ready(bound)

    announcing = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        announcing.cancel()
