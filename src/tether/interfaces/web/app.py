"""The HTTP API and page of ``tether serve`` (FastAPI): the app, its error handlers and the page; each
area's routes are a router of their own (``threads``, ``jobs``, ``runs``, ``files``, ``live``), their
documents in ``documents.py`` and what they share in ``context.py``.

Everything a person does here goes where the CLI's commands go, as the caller ``web``:

- a message or a confirmation becomes a durable turn for the home's executor (``conversations.submit``;
  this server is that executor), answered at once with its request id — the turn's steps arrive as
  events;
- jobs are listed, queried and stopped through ``Executor.control`` and ``Executor.jobs_for``;
- goal runs are started, answered, cancelled and resumed through ``supervisor.service``.

Live events are Server-Sent Events read from the persisted event log (``stream.EventHub``), resumable
with ``Last-Event-ID``. The OpenAPI document is at ``/api/openapi.json``. ``security.Guard`` wraps the
whole app (host, token, cross-site and size checks; security headers).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, MutableMapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match, Route

from tether.errors import TetherError
from tether.interfaces.web import agents, files, initiative, jobs, live, memory, runs, security, threads
from tether.interfaces.web.context import WebContext
from tether.interfaces.web.documents import ERRORS, ApiError, Info, printable
from tether.interfaces.web.stream import EventHub
from tether.supervisor import conversations

STATIC = Path(__file__).parent / "static"


# -- the app -------------------------------------------------------------------------------------


def create_app(ctx: WebContext) -> Any:
    """The ASGI app: the API and the page behind ``security.Guard``."""
    hub = EventHub(ctx.runtime.events, max_subscribers=ctx.max_subscribers)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await hub.start()
        tasks = [asyncio.create_task(work) for work in ctx.background]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await hub.stop()

    from tether import __version__

    app = FastAPI(
        title="tether",
        version=__version__,
        description="Talk to the agent, follow its steps, approve, stop jobs and follow goal runs.",
        openapi_url="/api/openapi.json",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        responses=ERRORS,
    )
    app.state.hub = hub

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse({"detail": {"code": exc.code, "message": exc.message}}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        """FastAPI's 422 document, without echoing the input (which may not even encode: a lone
        surrogate in a JSON string made the default handler fail with a 500)."""
        errors = [
            {"loc": [str(part) for part in e.get("loc", ())], "msg": printable(str(e.get("msg", ""))),
             "type": str(e.get("type", "invalid"))}
            for e in exc.errors()
        ]  # fmt: skip
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """Starlette's own refusals (unknown path, wrong method, an unreadable body) in our shape."""
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid")
        body = {"detail": {"code": code, "message": str(exc.detail)}}
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            routes = [*app.router.routes, *(route for router in routers for route in router.routes)]
            headers["Allow"] = _allow(routes, request.scope) or headers.get("Allow", "")
        return JSONResponse(body, status_code=exc.status_code, headers=headers)

    @app.exception_handler(conversations.Busy)
    async def busy(_: Request, exc: conversations.Busy) -> JSONResponse:
        return JSONResponse({"detail": {"code": "conflict", "message": exc.message}}, status_code=409)

    @app.exception_handler(TetherError)
    async def refused(_: Request, exc: TetherError) -> JSONResponse:
        return JSONResponse({"detail": {"code": "invalid", "message": exc.message}}, status_code=400)

    _document_security(app, ctx.policy)
    _page_routes(app, ctx)
    routers = [
        *(area.router(ctx) for area in (threads, agents, memory, initiative, jobs, runs, files)),
        live.router(ctx, hub),
    ]
    for router in routers:
        app.include_router(router)
    return security.Guard(app, ctx.policy)


def _document_security(app: FastAPI, policy: security.Policy) -> None:
    """The OpenAPI document says what ``security.Guard`` asks of every API request: the token, as a
    bearer or in the page's cookie."""
    build = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {})["securitySchemes"] = {
                "token": {"type": "http", "scheme": "bearer", "description": "the token in <home>/web/token"},
                "pageCookie": {"type": "apiKey", "in": "cookie", "name": policy.cookie,
                               "description": "set by opening the URL `tether serve` printed"},
            }  # fmt: skip
            schema["security"] = [{"token": []}, {"pageCookie": []}]
        return app.openapi_schema or {}

    app.openapi = document  # type: ignore[method-assign]


METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allow(routes: Iterable[BaseRoute], scope: MutableMapping[str, Any]) -> str:
    """Every method the request's path takes, for a 405's ``Allow``. Starlette names only the methods of
    the first route whose path matched (``Allow: GET`` on a path that also takes POST): a path's methods
    are spread over one route per operation."""
    methods: set[str] = set()
    for route in routes:  # the app's own, and each router's: an included router is one entry of the app's
        if isinstance(route, Route) and route.matches(scope)[0] is not Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods, key=lambda m: (*METHOD_ORDER, m).index(m)))


def _page_routes(app: FastAPI, ctx: WebContext) -> None:
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    # The page is one small file shipped with tether: read once, answered from memory on the loop (a
    # FileResponse from a sync route took two thread hops per load: 2.3x a plain uvicorn page).
    page_bytes = (STATIC / "index.html").read_bytes()

    @app.get("/", include_in_schema=False)
    async def index(token: str | None = None) -> Response:
        if token is not None:
            if not ctx.policy.valid_token(token):
                return JSONResponse(
                    {"detail": {"code": "unauthorized", "message": "that token is not this server's"}},
                    status_code=401,
                )
            page = RedirectResponse("/", status_code=303)
            page.set_cookie(
                ctx.policy.cookie,
                token,
                max_age=security.COOKIE_MAX_AGE_S,
                httponly=True,
                samesite="strict",
                path="/",
            )
            return page
        return Response(
            page_bytes, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-store"}
        )

    @app.get("/api/info", response_model=Info)
    def info() -> Info:
        return Info(
            version=app.version,
            model=ctx.model_label,
            executor_id=ctx.executor_id,
            last_event_id=ctx.runtime.events.last_id(),
            home=ctx.runtime.home.name,
        )
