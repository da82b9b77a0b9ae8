"""The HTTP API and page of ``tether serve`` (FastAPI).

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
import json
import re
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Body, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from tether.agent.session import THREAD_ID_RE
from tether.errors import TetherError
from tether.execution.executor import EXECUTION_ID_RE
from tether.execution.protocol import ExecutionPaths, log_tail
from tether.interfaces.web import security
from tether.interfaces.web.stream import EventHub, Full
from tether.runtime import Runtime
from tether.store.artifact_files import file_of, sweep
from tether.store.runs import RunRecord
from tether.store.threads import ThreadState
from tether.supervisor import conversations, service
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import Registry

STATIC = Path(__file__).parent / "static"
CALLER = "web"
SOURCE = "person:web"
RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
TASK_ID = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
PENDING_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"
MAX_INT = 2**62
AGENT_THREAD = conversations.AGENT_THREAD  # an agent task's thread in a goal run: the run's questions

ThreadId = Annotated[str, PathParam(pattern=THREAD_ID_RE.pattern, description="a thread id")]
ExecutionId = Annotated[str, PathParam(pattern=EXECUTION_ID_RE.pattern, description="an execution id")]
RunId = Annotated[str, PathParam(pattern=RUN_ID, description="a run id")]
TaskId = Annotated[str, PathParam(pattern=TASK_ID, description="a task of the run's plan")]
PendingId = Annotated[str, PathParam(pattern=PENDING_ID, description="the id of the question asked")]


@dataclass
class WebContext:
    """What the app serves from: one home's runtime, its registry and its executor."""

    runtime: Runtime
    registry: Registry
    executor: Any
    client: Any  # a DBOS client of the home
    policy: security.Policy
    model_label: str = "offline"
    executor_id: str = ""
    max_subscribers: int = 64
    offline: bool = True
    background: list[Any] = field(default_factory=list)  # coroutines run for the app's lifetime


# -- the documents -------------------------------------------------------------------------------


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Input(_Doc):
    """A request body: every string in it must be text (a lone surrogate in a JSON string is not, and
    could not be stored)."""

    @model_validator(mode="after")
    def _text(self) -> _Input:
        try:
            json.dumps(self.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("the body holds a string that is not valid text (a lone surrogate)") from None
        return self


class ErrorDetail(_Doc):
    code: str
    message: str


class ErrorBody(_Doc):
    detail: ErrorDetail


class Info(_Doc):
    version: str
    model: str
    executor_id: str
    last_event_id: int
    home: str


class Confirmation(_Doc):
    thread_id: str
    pending_id: str
    tool: str
    args: dict[str, Any]
    danger: str | None
    question: str


class Confirmations(_Doc):
    items: list[Confirmation]


class Thread(_Doc):
    thread_id: str
    title: str
    turns: int
    created_at: str
    updated_at: str
    running: bool
    pending: Confirmation | None


class ThreadPage(_Doc):
    items: list[Thread]
    next: str | None = Field(description="pass as `before` for the next page; null on the last")


class NewThread(_Input):
    title: str = Field(default="", max_length=200)


class Rename(_Input):
    title: str = Field(min_length=1, max_length=200)


class Deleted(_Doc):
    thread_id: str
    cancelled_turns: int
    stopped_jobs: list[str]
    removed_files: int = 0


class TurnCancelled(_Doc):
    thread_id: str
    turn: int | None = Field(description="the turn that was cancelled; null when none was running")
    cancelled: bool = Field(description="false when there was nothing to cancel")
    stopped_jobs: list[str] = Field(description="the jobs the turn was waiting on, now stopped")


class Message(_Doc):
    turn: int
    role: Literal["user", "assistant"]
    text: str
    status: str
    at: str | None


class Messages(_Doc):
    items: list[Message]


class NewMessage(_Input):
    text: str = Field(min_length=1, max_length=20_000)
    formats: list[Literal["md", "html", "pptx", "pdf"]] = Field(
        default_factory=list, max_length=4, description="the files the person ticked for this turn"
    )


class ArtifactDoc(_Doc):
    artifact_id: int
    thread_id: str | None
    step_id: str | None
    execution_id: str
    format: str
    name: str
    size: int
    created_at: str
    url: str = Field(description="where to download it")


class Artifacts(_Doc):
    items: list[ArtifactDoc]


class Accepted(_Doc):
    thread_id: str
    request_id: str


class Step(_Doc):
    step_id: str
    turn: int
    index: int
    kind: str
    status: str
    tool: str | None
    args: dict[str, Any] | None
    result: dict[str, Any] | None
    text: str
    execution_id: str | None
    call_id: str | None
    created_at: str


class Steps(_Doc):
    items: list[Step]


class Job(_Doc):
    task_id: str
    execution_id: str
    status: str
    message: str
    duration_seconds: float
    data: dict[str, Any]


class Jobs(_Doc):
    items: list[Job]


class JobLog(_Doc):
    execution_id: str
    text: str


class Attempt(_Doc):
    attempt: int
    execution_id: str
    status: str
    message: str
    duration_seconds: float


class Call(_Doc):
    task: str
    args: dict[str, Any]


class RunTask(_Doc):
    task_id: str
    title: str
    status: str
    attempts: int
    message: str
    needs: list[str]
    review: dict[str, Any] | None
    diagnostics: dict[str, Any]
    call: Call | None
    description: str | None
    steps: list[Attempt]


class Run(_Doc):
    run_id: str
    status: str
    goal: str
    message: str
    created_at: str
    ended_at: str | None
    tasks: list[RunTask]


class RunSummary(_Doc):
    run_id: str
    status: str
    goal: str
    message: str
    created_at: str
    ended_at: str | None
    tasks_total: int
    tasks_done: int


class Runs(_Doc):
    items: list[RunSummary]


class NewRun(_Input):
    goal: str = Field(min_length=1, max_length=4000)


class Answer(_Input):
    reason: str = Field(default="", max_length=500)


class Edit(_Input):
    args: dict[str, Any] | None = None
    description: str | None = Field(default=None, max_length=4000)
    reason: str = Field(default="", max_length=500)


class Resumed(_Doc):
    run: Run
    done: str


# -- errors --------------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _printable(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")[:500]


def _not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", what)


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "the request cannot be done as asked (the message says why)"),
        (401, "no valid token"),
        (403, "a cross-site request"),
        (404, "no such thing (or not visible to this caller)"),
        (
            409,
            "the thread is in a turn already (or, to cancel, in one run by another process); a job "
            "that cannot be stopped or read here (it runs on another host, or cannot be stopped: the "
            "message says)",
        ),
        (405, "the path does not take that method"),
        (413, "the request body is too large"),
        (421, "not a loopback host"),
        (503, "too many pages follow the events"),
    )
}


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
            {"loc": [str(part) for part in e.get("loc", ())], "msg": _printable(str(e.get("msg", ""))),
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
            headers["Allow"] = _allow(app, request.scope) or headers.get("Allow", "")
        return JSONResponse(body, status_code=exc.status_code, headers=headers)

    @app.exception_handler(conversations.Busy)
    async def busy(_: Request, exc: conversations.Busy) -> JSONResponse:
        return JSONResponse({"detail": {"code": "conflict", "message": exc.message}}, status_code=409)

    @app.exception_handler(TetherError)
    async def refused(_: Request, exc: TetherError) -> JSONResponse:
        return JSONResponse({"detail": {"code": "invalid", "message": exc.message}}, status_code=400)

    _document_security(app, ctx.policy)
    _page_routes(app, ctx)
    _thread_routes(app, ctx)
    _job_routes(app, ctx)
    _run_routes(app, ctx)
    _artifact_routes(app, ctx)
    _event_routes(app, ctx, hub)
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


def _allow(app: FastAPI, scope: MutableMapping[str, Any]) -> str:
    """Every method the request's path takes, for a 405's ``Allow``. Starlette names only the methods of
    the first route whose path matched (``Allow: GET`` on a path that also takes POST): a path's methods
    are spread over one route per operation."""
    methods: set[str] = set()
    for route in app.router.routes:
        if isinstance(route, Route) and route.matches(scope)[0] is not Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods, key=lambda m: (*METHOD_ORDER, m).index(m)))


def _page_routes(app: FastAPI, ctx: WebContext) -> None:
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index(token: str | None = None) -> Response:
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
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    @app.get("/api/info", response_model=Info)
    def info() -> Info:
        return Info(
            version=app.version,
            model=ctx.model_label,
            executor_id=ctx.executor_id,
            last_event_id=ctx.runtime.events.last_id(),
            home=ctx.runtime.home.name,
        )


# -- threads -------------------------------------------------------------------------------------


def _confirmation(ctx: WebContext, state: ThreadState) -> Confirmation | None:
    found = conversations.question(ctx.runtime, state)
    return None if found is None else Confirmation(**found)


def _thread(ctx: WebContext, state: ThreadState, live: set[str]) -> Thread:
    running = state.thread_id in live or conversations.running(ctx.runtime, state.thread_id)
    return Thread(
        thread_id=state.thread_id,
        title=state.title,
        turns=state.turns,
        created_at=state.created_at,
        updated_at=state.updated_at,
        running=running,
        pending=_confirmation(ctx, state),
    )


def _live(ctx: WebContext) -> set[str]:
    return {thread for _, thread in conversations.live_turns(ctx.client)}


def _load(ctx: WebContext, thread_id: str) -> ThreadState:
    state = ctx.runtime.threads.load(thread_id)
    if state is None:
        raise _not_found(f"no thread {thread_id!r}")
    return state


def _thread_routes(app: FastAPI, ctx: WebContext) -> None:
    threads = ctx.runtime.threads

    @app.get("/api/threads", response_model=ThreadPage)
    def list_threads(
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        before: Annotated[str | None, Query(max_length=300, description="the `next` of a page")] = None,
    ) -> ThreadPage:
        cursor = None
        if before is not None:
            at, bar, thread_id = before.partition("|")
            if not bar or not THREAD_ID_RE.match(thread_id):
                raise ApiError(400, "invalid", "`before` takes the `next` value of the previous page")
            cursor = (at, thread_id)
        found = threads.threads(limit=limit + 1, before=cursor)
        live = _live(ctx)
        items = [_thread(ctx, state, live) for state in found[:limit]]
        last = found[limit - 1] if len(found) > limit else None
        return ThreadPage(items=items, next=None if last is None else f"{last.updated_at}|{last.thread_id}")

    @app.post("/api/threads", response_model=Thread, status_code=201)
    def create_thread(body: Annotated[NewThread | None, Body()] = None) -> Thread:
        from tether.interfaces.agent_cli import new_thread_id

        state = ThreadState(thread_id=new_thread_id(), title=" ".join((body or NewThread()).title.split()))
        threads.save(state)
        return _thread(ctx, _load(ctx, state.thread_id), set())

    @app.get("/api/threads/{thread_id}", response_model=Thread)
    def get_thread(thread_id: ThreadId) -> Thread:
        return _thread(ctx, _load(ctx, thread_id), _live(ctx))

    @app.patch("/api/threads/{thread_id}", response_model=Thread)
    def rename_thread(thread_id: ThreadId, body: Rename) -> Thread:
        title = " ".join(body.title.split())
        if not title:
            raise ApiError(400, "invalid", "a title needs at least one visible character")
        if not threads.rename(thread_id, title):
            raise _not_found(f"no thread {thread_id!r}")
        return _thread(ctx, _load(ctx, thread_id), _live(ctx))

    @app.delete("/api/threads/{thread_id}", response_model=Deleted)
    async def delete_thread(thread_id: ThreadId) -> Deleted:
        if await asyncio.to_thread(threads.load, thread_id) is None:
            raise _not_found(f"no thread {thread_id!r}")
        done = await conversations.delete_thread(
            ctx.runtime, ctx.executor, ctx.client, thread_id, caller=CALLER
        )
        return Deleted(**done)

    @app.post("/api/threads/{thread_id}/turn/cancel", response_model=TurnCancelled)
    async def cancel_turn(thread_id: ThreadId) -> TurnCancelled:
        """Cancel the thread's running turn, as Ctrl-C does in the CLI: it ends at once (interrupted),
        and the job it was waiting on is stopped. A background job it had handed off goes on."""
        if await asyncio.to_thread(threads.load, thread_id) is None:
            raise _not_found(f"no thread {thread_id!r}")
        done = await conversations.cancel_turn(
            ctx.runtime, ctx.executor, ctx.client, thread_id, caller=CALLER
        )
        return TurnCancelled(**done)

    @app.get("/api/threads/{thread_id}/messages", response_model=Messages)
    def list_messages(thread_id: ThreadId, limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> Messages:
        _load(ctx, thread_id)
        items: list[Message] = []
        for turn in threads.turns(thread_id, limit):
            items.append(Message(turn=turn.turn, role="user", text=turn.message, status=turn.status,
                                 at=turn.started_at))  # fmt: skip
            if turn.status != "running":
                items.append(Message(turn=turn.turn, role="assistant", text=turn.final, status=turn.status,
                                     at=turn.ended_at))  # fmt: skip
        return Messages(items=items)

    @app.post("/api/threads/{thread_id}/messages", response_model=Accepted, status_code=202)
    def post_message(thread_id: ThreadId, body: NewMessage) -> Accepted:
        if not body.text.strip():
            raise ApiError(400, "invalid", "say what you want done")
        request_id = conversations.submit(
            ctx.runtime, ctx.client, thread_id, message=body.text, source=SOURCE, formats=body.formats
        )
        return Accepted(thread_id=thread_id, request_id=request_id)

    @app.get("/api/threads/{thread_id}/steps", response_model=Steps)
    def list_steps(thread_id: ThreadId, turn: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None) -> Steps:
        _load(ctx, thread_id)
        return Steps(items=[Step(**s.to_dict()) for s in threads.steps(thread_id, turn)])

    @app.get("/api/confirmations", response_model=Confirmations)
    def list_confirmations() -> Confirmations:
        return Confirmations(items=[Confirmation(**q) for q in conversations.questions(ctx.runtime)])

    def answer(thread_id: str, pending_id: str, approve: bool) -> Accepted:
        state = _load(ctx, thread_id)
        waiting = None if state.pending is None else str(state.pending.get("id"))
        if thread_id.startswith(AGENT_THREAD):
            waiting = None  # answered through its run, never as a conversation turn
        if waiting != pending_id:
            raise _not_found(f"thread {thread_id!r} is not waiting on question {pending_id!r}")
        request_id = conversations.submit(
            ctx.runtime, ctx.client, thread_id, approve=approve, pending_id=pending_id, source=SOURCE
        )
        return Accepted(thread_id=thread_id, request_id=request_id)

    @app.post(
        "/api/threads/{thread_id}/confirmations/{pending_id}/approve",
        response_model=Accepted,
        status_code=202,
    )
    def approve(thread_id: ThreadId, pending_id: PendingId) -> Accepted:
        """Run exactly the call the question is about, once."""
        return answer(thread_id, pending_id, True)

    @app.post(
        "/api/threads/{thread_id}/confirmations/{pending_id}/deny", response_model=Accepted, status_code=202
    )
    def deny(thread_id: ThreadId, pending_id: PendingId) -> Accepted:
        """Decline the call the question is about: it does not run."""
        return answer(thread_id, pending_id, False)


# -- jobs ----------------------------------------------------------------------------------------


def _job(result: TaskResult) -> Job:
    return Job(**result.model_dump(mode="json"))


async def _visible_job(ctx: WebContext, execution_id: str, action: Literal["status", "stop"]) -> TaskResult:
    result = await ctx.executor.control(
        execution_id, action, caller=CALLER, reason="stopped from the web page" if action == "stop" else None
    )
    if result.status is TaskStatus.NOT_FOUND:
        raise _not_found(result.message)
    return result


def _job_routes(app: FastAPI, ctx: WebContext) -> None:
    @app.get("/api/jobs", response_model=Jobs)
    def list_jobs(
        active: bool = False,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        origin: Annotated[str | None, Query(max_length=200, pattern=r"^(thread|run|job):[\w.:-]+$")] = None,
    ) -> Jobs:
        found = ctx.executor.jobs_for(CALLER, origin=origin, active=active, limit=limit)
        return Jobs(items=[_job(r) for r in found])

    @app.get("/api/jobs/{execution_id}", response_model=Job)
    async def job_status(execution_id: ExecutionId) -> Job:
        return _job(await _visible_job(ctx, execution_id, "status"))

    @app.post("/api/jobs/{execution_id}/stop", response_model=Job, responses={409: ERRORS[409]})
    async def stop_job(execution_id: ExecutionId) -> Job:
        """Stop a job: cooperatively, then SIGINT, then kill its process tree. A job this home cannot
        stop (it runs on another installation of a shared database, or inside a process and does not
        look for a stop) is answered 409, saying where it runs or when it ends."""
        result = await _visible_job(ctx, execution_id, "stop")
        if result.data.get("stop_refused"):
            raise ApiError(409, "not_stoppable", result.message)
        return _job(result)

    @app.get("/api/jobs/{execution_id}/log", response_model=JobLog, responses={409: ERRORS[409]})
    async def job_log(execution_id: ExecutionId, lines: Annotated[int, Query(ge=1, le=500)] = 50) -> JobLog:
        result = await _visible_job(ctx, execution_id, "status")
        elsewhere = result.data.get("elsewhere")
        if isinstance(elsewhere, dict):  # its log is on the host that ran it
            raise ApiError(409, "elsewhere", str(elsewhere.get("message", "it ran on another host")))
        paths = ExecutionPaths.of(ctx.runtime.home, result.execution_id)
        text = await asyncio.to_thread(log_tail, paths, lines)
        return JobLog(execution_id=result.execution_id, text=text)


# -- goal runs -----------------------------------------------------------------------------------


def _run(run: RunRecord) -> Run:
    tasks_by_id = {t.get("id"): t for t in run.plan.get("tasks", []) if isinstance(t, dict)}
    document = service.run_document(run)
    items = []
    for task in document["tasks"]:
        planned = tasks_by_id.get(task["id"], {})
        call = planned.get("call")
        overrides = task.get("overrides") or {}
        if isinstance(call, dict):
            call = Call(task=str(call.get("task", "")), args=overrides.get("args", call.get("args") or {}))
            title = call.task
        else:
            call = None
            title = str(overrides.get("description") or planned.get("description", ""))[:200]
        items.append(
            RunTask(
                task_id=task["id"],
                title=title,
                status=task["status"],
                attempts=task["attempts"],
                message=task["message"],
                needs=list(planned.get("depends_on", [])),
                review=task["review"],
                diagnostics=task["diagnostics"],
                call=call,
                description=None if call is not None else str(planned.get("description", "")),
                steps=[Attempt(**s) for s in task["steps"]],
            )
        )
    return Run(
        run_id=run.run_id,
        status=run.status,
        goal=run.goal,
        message=run.message,
        created_at=run.created_at,
        ended_at=run.ended_at,
        tasks=items,
    )


def _summary(run: RunRecord, counts: tuple[int, int]) -> RunSummary:
    return RunSummary(
        run_id=run.run_id,
        status=run.status,
        goal=run.goal,
        message=run.message,
        created_at=run.created_at,
        ended_at=run.ended_at,
        tasks_total=counts[0],
        tasks_done=counts[1],
    )


def _find_run(ctx: WebContext, run_id: str) -> RunRecord:
    record = ctx.runtime.runs.get(run_id)
    if record is None:
        raise _not_found(f"no run {run_id!r}")
    return record


def _run_routes(app: FastAPI, ctx: WebContext) -> None:
    runs = ctx.runtime.runs

    @app.get("/api/runs", response_model=Runs)
    def list_runs(limit: Annotated[int, Query(ge=1, le=200)] = 50) -> Runs:
        found = runs.list(limit=limit)
        counts = runs.task_counts([r.run_id for r in found])
        return Runs(items=[_summary(r, counts.get(r.run_id, (0, 0))) for r in found])

    @app.post("/api/runs", response_model=Run, status_code=201)
    async def start_run(body: NewRun) -> Run:
        """Plan a goal and run it: the offline planner plans at once; a model plans in the run's first
        step."""
        goal = body.goal.strip()
        if not goal:
            raise ApiError(400, "invalid", "say what you want done")
        record = await service.begin_goal(ctx.runtime, ctx.registry, goal, offline=ctx.offline)
        return _run(await asyncio.to_thread(_find_run, ctx, record.run_id))

    @app.get("/api/runs/{run_id}", response_model=Run)
    def get_run(run_id: RunId) -> Run:
        return _run(_find_run(ctx, run_id))

    def answer(run_id: str, task_id: str, verb: service.Verb, **extra: Any) -> Run:
        _find_run(ctx, run_id)
        record = service.answer(ctx.runtime, ctx.registry, run_id, task_id, verb, by=CALLER, **extra)
        return _run(record)

    @app.post("/api/runs/{run_id}/tasks/{task_id}/approve", response_model=Run)
    def approve_task(run_id: RunId, task_id: TaskId, body: Annotated[Answer | None, Body()] = None) -> Run:
        return answer(run_id, task_id, "approve", reason=(body or Answer()).reason)

    @app.post("/api/runs/{run_id}/tasks/{task_id}/reject", response_model=Run)
    def reject_task(run_id: RunId, task_id: TaskId, body: Annotated[Answer | None, Body()] = None) -> Run:
        return answer(run_id, task_id, "reject", reason=(body or Answer()).reason)

    @app.post("/api/runs/{run_id}/tasks/{task_id}/edit", response_model=Run)
    def edit_task(run_id: RunId, task_id: TaskId, body: Edit) -> Run:
        return answer(
            run_id, task_id, "edit", args=body.args, description=body.description, reason=body.reason
        )

    @app.post("/api/runs/{run_id}/cancel", response_model=Run)
    async def cancel_run(run_id: RunId) -> Run:
        await asyncio.to_thread(_find_run, ctx, run_id)
        return _run(await service.cancel_run(ctx.runtime, ctx.executor, run_id, by=CALLER))

    @app.post("/api/runs/{run_id}/resume", response_model=Resumed)
    def resume_run(run_id: RunId) -> Resumed:
        _find_run(ctx, run_id)
        record, done = service.resume(ctx.runtime, run_id)
        return Resumed(run=_run(record), done=done)


# -- live events ---------------------------------------------------------------------------------

TOPIC = r"^(thread|run|job):[A-Za-z0-9_.:-]{1,200}$"


def _artifact_doc(artifact: Any) -> ArtifactDoc:
    fields = {k: v for k, v in artifact.to_dict().items() if k in ArtifactDoc.model_fields}
    return ArtifactDoc(**fields, url=f"/api/artifacts/{artifact.artifact_id}/download")


MEDIA_TYPES = {
    "md": "text/markdown; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "pdf": "application/pdf",
}


def _artifact_routes(app: FastAPI, ctx: WebContext) -> None:
    store = ctx.runtime.artifacts

    def current(**where: Any) -> Artifacts:
        sweep(ctx.runtime.home, store, ctx.runtime.jobs)  # superseded files go before the list is read
        return Artifacts(items=[_artifact_doc(a) for a in store.list(**where)])

    @app.get("/api/artifacts", response_model=Artifacts)
    def list_artifacts(limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Artifacts:
        """The files generated in this home, newest first (a thread offers its newest per format)."""
        return current(limit=limit)

    @app.get("/api/threads/{thread_id}/artifacts", response_model=Artifacts)
    def thread_artifacts(thread_id: ThreadId) -> Artifacts:
        _load(ctx, thread_id)
        return current(thread_id=thread_id)

    @app.get("/api/artifacts/{artifact_id}/download", response_class=FileResponse)
    def download(artifact_id: Annotated[int, PathParam(ge=1, le=MAX_INT)]) -> FileResponse:
        """The file itself, as an attachment (never rendered by the page: an html file is a download)."""
        artifact = store.get(artifact_id)
        path = None if artifact is None or artifact.superseded_at else file_of(ctx.runtime.home, artifact)
        if artifact is None or path is None:
            raise _not_found(f"no file {artifact_id} (it may have been replaced by a newer one)")
        return FileResponse(
            path,
            media_type=MEDIA_TYPES.get(artifact.format, "application/octet-stream"),
            filename=artifact.name,
            content_disposition_type="attachment",
            headers={"Cache-Control": "no-store"},
        )


def _event_routes(app: FastAPI, ctx: WebContext, hub: EventHub) -> None:
    @app.get(
        "/api/events",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"}},
    )
    async def events(
        request: Request,
        after: Annotated[int | None, Query(ge=0, le=MAX_INT, description="send events after this id")] = None,
        topic: Annotated[list[str] | None, Query(max_length=20, description="only these topics")] = None,
    ) -> StreamingResponse:
        """Every event of the log after ``after`` (or the ``Last-Event-ID`` header, which wins), then
        each new one as it is committed, as Server-Sent Events (``id``, ``event`` = its kind, ``data``
        = its JSON). Without either, from now on."""
        for name in topic or []:
            if not re.match(TOPIC, name):
                raise ApiError(400, "invalid", "a topic is thread:<id>, run:<id> or job:<id>")
        resume = request.headers.get("last-event-id")
        if resume is not None:
            if not re.fullmatch(r"[0-9]{1,18}", resume):
                raise ApiError(400, "invalid", "Last-Event-ID must be the id of an event")
            after = int(resume)
        if after is None:
            after = await asyncio.to_thread(ctx.runtime.events.last_id)
        try:
            subscriber = hub.subscribe()
        except Full as exc:
            raise ApiError(503, "busy", f"{exc}; close a page and try again") from None

        async def body() -> AsyncIterator[bytes]:
            try:
                yield b"retry: 1000\n\n"
                async for event in hub.events(subscriber, after, topic):
                    yield hub.encode(event)
            finally:
                hub.unsubscribe(subscriber)

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
