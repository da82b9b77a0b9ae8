"""tether as an MCP server: the tasks exposed to the caller ``mcp`` become MCP tools, and every call
goes through the executor as that caller (contract 2), over stdio or streamable HTTP.

Built on the official ``mcp`` SDK's low-level ``Server``. Only ``tether mcp serve`` imports this
module (the SDK takes about 1.5 s to import): nothing else on a command's start path may.

- **The tools** are ``registry.for_caller(MCP)``: each task's JSON schema, description and honest
  annotations (``tool_annotations``). A call of a tool that is not among them is answered ``not_found``
  by the executor, like any unknown task.
- **Consent.** A call the executor refuses with ``needs_confirmation`` is asked about through MCP
  elicitation: the person sees the exact task and arguments, and an accept is their consent to that
  one call (``Executor.confirm`` with the source ``person:mcp``, used once). On a 2026-07-28
  connection the question rides an ``InputRequiredResult`` and the answer comes back with the retried
  call; the state that ties the two is a random one-use key of a question this process asked, bound
  to the task and the digest of its arguments. Handshake-era connections get an ``elicitation/create``
  request mid-call. A decline or cancel runs nothing; a client that cannot elicit is told how to
  confirm instead (``tether task run … --confirm``).
- **Jobs.** A background task answers with its execution id once its worker is running;
  ``jobs.status`` and ``jobs.stop`` (tasks every caller sees) look at and stop the jobs ``mcp`` may
  see. A foreground call's progress reaches the client as MCP progress notifications, and a client's
  cancellation stops the job (cooperatively, then SIGINT, then the process tree).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shlex
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import is_version_at_least
from pydantic import ValidationError

import tether.telemetry as telemetry
from tether import __version__
from tether.agent.texts import call_described
from tether.errors import ToolError
from tether.execution.protocol import last_progress
from tether.interfaces.base import DEFAULT_REGISTRY
from tether.tasks.callers import MCP
from tether.tasks.grants import Grants
from tether.tasks.result import TaskResult, TaskStatus
from tether.tasks.spec import CONTROL, Danger

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from tether.execution.executor import Executor
    from tether.tasks.spec import TaskSpec

SOURCE = "person:mcp"
SERVER_NAME = "tether"
CONSENT_KEY = "tether.consent"  # the key of the one input request a call can need
CONSENT_TTL_S = 600.0  # how long a question asked on a 2026-07-28 connection stays answerable
MAX_PENDING = 256  # questions asked and not yet answered, per server; the oldest go first
PROGRESS_POLL_S = 0.1
HTTP_PATH = "/mcp"
INPUT_REQUIRED_VERSION = "2026-07-28"  # the first version whose tools/call carries elicitation inline
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
CONSENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confirm": {
            "type": "boolean",
            "title": "Run exactly this call once / 仅执行这一次调用",
            "description": "Tick to run it; leave it or decline to run nothing.",
        }
    },
    "required": ["confirm"],
}
READS_ONLY = frozenset({"jobs.status"})  # the executor's own answer about a job: it changes nothing
# tether's own toolkits that act only on this machine (the home, the workspace, the demo game).
LOCAL_FAMILIES = frozenset({"jobs", "workspace", "documents", "skills", "demo", "memory"})


@dataclass(frozen=True, slots=True)
class Question:
    """A consent question asked on a 2026-07-28 connection, waiting for the retried call."""

    task_id: str
    digest: str
    expires: float


def tool_annotations(spec: TaskSpec) -> types.ToolAnnotations:
    """What a client may be told about a task, and no more than tether knows (a hint left unset
    leaves the client at MCP's cautious default: may change things, destructively, in an open world).

    ``readOnlyHint`` is true only for ``jobs.status``: that a safe task changes nothing is not something
    a spec says. ``destructiveHint`` follows the danger: true for ``destructive`` (or a ``destructive_if``
    argument that can make one call so), false for ``safe``, unset for ``caution``. ``idempotentHint``
    is the spec's ``idempotent``. ``openWorldHint`` is true for ``web.*`` (the internet), false for
    tether's own local toolkits, unset for anything else (a shell command, your own tasks)."""
    if spec.danger is Danger.DESTRUCTIVE or spec.destructive_if:
        destructive: bool | None = True
    else:
        destructive = False if spec.danger is Danger.SAFE else None
    family = spec.task_id.partition(".")[0]
    open_world = True if family == "web" else False if family in LOCAL_FAMILIES else None
    return types.ToolAnnotations(
        read_only_hint=spec.task_id in READS_ONLY,
        destructive_hint=destructive,
        idempotent_hint=spec.idempotent or spec.task_id in READS_ONLY,
        open_world_hint=open_world,
    )


def describe(spec: TaskSpec, unavailable: str | None = None) -> str:
    """The tool's description: the spec's, how a call of it behaves here, and why it cannot be used
    in this home when it cannot (it is still listed: the executor answers its calls with that)."""
    parts = [spec.description.strip() or spec.task_id]
    if unavailable:
        parts.append(f"Unavailable in this home: {unavailable}")
    asks = "the person is asked to confirm the exact call before it runs"
    if spec.danger is Danger.DESTRUCTIVE:
        parts.append(f"It is destructive: {asks}.")
    elif spec.danger is Danger.CAUTION:
        parts.append(f"It needs care (caution): {asks}.")
    if spec.destructive_if and spec.danger is not Danger.DESTRUCTIVE:
        names = " or ".join(spec.destructive_if)
        parts.append(f"A call with {names} true is destructive: {asks}.")
    if spec.background:
        parts.append(
            "It runs in the background: the call returns its execution id at once; "
            "follow it with jobs.status and stop it with jobs.stop."
        )
    return " ".join(parts)


def tool(spec: TaskSpec, unavailable: str | None = None) -> types.Tool:
    schema = spec.params.model_json_schema() if spec.params is not None else dict(EMPTY_SCHEMA)
    meta = {
        "tether/danger": spec.danger.value,
        "tether/background": spec.background,
        "tether/resources": list(spec.resources),
    }
    return types.Tool(
        name=spec.task_id,
        description=describe(spec, unavailable),
        input_schema=schema,
        annotations=tool_annotations(spec),
        _meta=meta,
    )


def tool_result(result: TaskResult, *, control: bool = False) -> types.CallToolResult:
    """The executor's answer as a tool result: its message as text, the whole result as structured
    content, an error unless it completed or runs. For ``jobs.status`` and ``jobs.stop`` (``control``)
    the answer is the job's state: the call is an error only when it found no job or was refused (a
    stop that stopped the job, or the status of a job that failed, is the call working)."""
    if control:
        ok = result.status not in (TaskStatus.NOT_FOUND, TaskStatus.REJECTED)
    else:
        ok = result.status in (TaskStatus.COMPLETED, TaskStatus.RUNNING)
    text = said_of(result)
    if result.status is TaskStatus.RUNNING:
        text += f"\nexecution id: {result.execution_id} (jobs.status to follow it, jobs.stop to stop it)"
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=result.model_dump(mode="json"),
        is_error=not ok,
    )


def said_of(result: TaskResult) -> str:
    """The task, its status and its message, the status said once ("x stopped (asked by mcp)", not
    "x stopped: stopped (asked by mcp)"; "x running", not "x running: running")."""
    status, message = result.status.value, result.message.strip()
    if not message or message == status:
        return f"{result.task_id} {status}"
    if message.startswith(status):
        return f"{result.task_id} {message}"
    return f"{result.task_id} {status}: {message}"


def progress_point(event: dict[str, Any], sent: float) -> tuple[float, float | None, str | None]:
    """A worker's progress report as MCP progress: percent of 100 when it gives a fraction, else one
    step on from the last notification (MCP wants each one further on than the one before)."""
    fraction = event.get("fraction")
    message = str(event.get("message") or "")[:500] or None
    if isinstance(fraction, int | float) and 0.0 <= fraction <= 1.0:
        return round(float(fraction) * 100, 3), 100.0, message
    return sent + 1, None, message


def refusal(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


class Bridge:
    """The MCP handlers of one server: the tools it lists, and each call through the executor."""

    def __init__(self, executor: Executor, grants: Grants | None = None) -> None:
        """``grants``: an agent's (``tether mcp serve --agent``); the client reaches only the tasks within
        them, and sees or stops only the jobs of those tasks."""
        self.executor = executor
        self.grants = grants
        self._asked: dict[str, Question] = {}  # one-use keys of the questions waiting for an answer
        self.zh = executor.runtime.agent_settings.language == "zh"

    # -- tools --------------------------------------------------------------------------------------

    def specs(self) -> list[TaskSpec]:
        return sorted(self.executor.registry.for_caller(MCP, self.grants), key=lambda s: s.task_id)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        specs = self.specs()
        unavailable = await asyncio.to_thread(self._unavailable, specs)
        return types.ListToolsResult(tools=[tool(spec, unavailable.get(spec.task_id)) for spec in specs])

    def _unavailable(self, specs: list[TaskSpec]) -> dict[str, str]:
        found: dict[str, str] = {}
        for spec in specs:
            try:
                why = spec.unavailable(self.executor.home)
            except Exception as exc:  # a broken check: the executor refuses the call and says why
                why = f"its availability check failed ({type(exc).__name__})"
            if why:
                found[spec.task_id] = why
        return found

    def input_schema(self, name: str) -> dict[str, Any] | None:
        spec = self.executor.registry.get(name, MCP, self.grants)
        if spec is None:
            return None
        return spec.params.model_json_schema() if spec.params is not None else dict(EMPTY_SCHEMA)

    # -- calls ------------------------------------------------------------------------------------

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        name, args = params.name, dict(params.arguments or {})
        meta = params.meta or {}
        with telemetry.span(
            f"tools/call {name}", _traced(ctx, name), parent=meta.get("traceparent")
        ) as traced:
            answer = await self._call(ctx, name, args, params)
            if isinstance(answer, types.CallToolResult):
                done = answer.structured_content or {}
                traced.set_attributes(
                    {
                        "tether.execution.id": done.get("execution_id"),
                        "tether.task.status": done.get("status"),
                    }
                )
                if answer.is_error:
                    traced.set_attribute("error.type", "tool_error")
                    traced.error(str(getattr(answer.content[0], "text", "")) if answer.content else "")
            return answer

    async def _call(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        args: dict[str, Any],
        params: types.CallToolRequestParams,
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.request_state is not None or params.input_responses:
            return await self._answered(ctx, name, args, params)
        result = await self._run(ctx, name, args, None)
        if result.status is TaskStatus.REJECTED and result.data.get("needs_confirmation"):
            return await self._ask(ctx, name, args, result)
        return tool_result(result, control=name in CONTROL)

    async def _run(
        self, ctx: ServerRequestContext[Any], name: str, args: dict[str, Any], consent: Any
    ) -> TaskResult:
        """One execution as the caller ``mcp``: its progress relayed to the client while it runs; a
        cancelled call (the client's ``notifications/cancelled``) stops the job before it ends."""
        started: list[str] = []
        relays: list[asyncio.Task[None]] = []

        def on_start(execution_id: str) -> None:
            started.append(execution_id)
            relays.append(asyncio.get_running_loop().create_task(self._relay(ctx, execution_id)))

        try:
            return await self.executor.execute(
                name, args, caller=MCP, confirmation=consent, on_start=on_start, grants=self.grants
            )
        except anyio.get_cancelled_exc_class():
            if started:
                with anyio.CancelScope(shield=True):
                    await self.executor.control(
                        started[0], "stop", caller=MCP, reason="cancelled by the MCP client",
                        grants=self.grants,
                    )  # fmt: skip
            raise
        finally:
            for relay in relays:
                relay.cancel()

    async def _relay(self, ctx: ServerRequestContext[Any], execution_id: str) -> None:
        """The worker's progress reports as MCP progress notifications (when the client asked for
        them with a progress token), each one further on than the last, as the protocol wants."""
        paths = self.executor.jobs.paths(execution_id)
        seen: dict[str, Any] | None = None
        sent = -1.0  # the first report may be 0
        while True:
            event = await asyncio.to_thread(last_progress, paths)
            if event is not None and event != seen:
                seen = event
                value, total, message = progress_point(event, sent)
                if value > sent:
                    sent = value
                    with contextlib.suppress(Exception):  # a client gone mid-call: the call ends anyway
                        await ctx.session.report_progress(value, total, message)
            await asyncio.sleep(PROGRESS_POLL_S)

    # -- consent ----------------------------------------------------------------------------------

    async def _ask(
        self, ctx: ServerRequestContext[Any], name: str, args: dict[str, Any], refused: TaskResult
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Ask the person about exactly this call: inline on a 2026-07-28 connection, else with an
        ``elicitation/create`` request; a client that cannot ask gets a refusal saying what to do."""
        if not can_elicit(ctx):
            return refusal(self._no_elicitation(name, refused))
        question = await self._question(name, refused)
        if is_version_at_least(ctx.protocol_version, INPUT_REQUIRED_VERSION):
            key = secrets.token_urlsafe(24)
            self._remember(key, Question(task_id=name, digest=str(refused.data["digest"]),
                                         expires=time.monotonic() + CONSENT_TTL_S))  # fmt: skip
            request = types.ElicitRequest(
                params=types.ElicitRequestFormParams(message=question, requested_schema=CONSENT_SCHEMA)
            )
            return types.InputRequiredResult(input_requests={CONSENT_KEY: request}, request_state=key)
        try:
            answer = await ctx.session.elicit_form(
                question, CONSENT_SCHEMA, related_request_id=ctx.request_id
            )
        except (MCPError, ValidationError) as exc:  # no answer is no consent (no back-channel, a failed form)
            return refusal(f"{name}: the client could not ask the person ({exc}): nothing ran")
        return await self._decided(ctx, name, args, answer, str(refused.data["digest"]))

    async def _answered(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        args: dict[str, Any],
        params: types.CallToolRequestParams,
    ) -> types.CallToolResult:
        """The call retried with the person's answer (2026-07-28): the answer counts once, only for
        the question this server asked about this task with these arguments."""
        key = params.request_state
        question = self._asked.pop(key, None) if isinstance(key, str) else None
        if question is None or question.task_id != name or question.expires < time.monotonic():
            return refusal(
                "this answer is to no question waiting here (unknown, expired or already used): "
                "nothing ran; call the tool again to be asked"
            )
        answer = (params.input_responses or {}).get(CONSENT_KEY)
        if not isinstance(answer, types.ElicitResult):
            return refusal("the retried call carries no answer to the question: nothing ran")
        return await self._decided(ctx, name, args, answer, question.digest)

    async def _decided(
        self,
        ctx: ServerRequestContext[Any],
        name: str,
        args: dict[str, Any],
        answer: types.ElicitResult,
        digest: str,
    ) -> types.CallToolResult:
        """Run the call once if the person accepted it (and ticked ``confirm``), else nothing."""
        if answer.action != "accept" or (answer.content or {}).get("confirm") is not True:
            said = "declined" if answer.action != "cancel" else "cancelled"
            zh = "已拒绝：没有执行。" if said == "declined" else "已取消：没有执行。"
            return refusal(f"{name}: the person {said} this call: nothing ran. / {zh}")
        try:
            consent = self.executor.confirm(name, args, caller=MCP, source=SOURCE)
        except ToolError:  # the call cannot run at all: the executor says why below
            consent = None
        if consent is not None and consent.digest != digest:
            return refusal(f"{name}: the arguments are not those the person was asked about: nothing ran")
        return tool_result(await self._run(ctx, name, args, consent))

    def _remember(self, key: str, question: Question) -> None:
        now = time.monotonic()
        for old in [k for k, q in self._asked.items() if q.expires < now]:
            del self._asked[old]
        while len(self._asked) >= MAX_PENDING:
            del self._asked[next(iter(self._asked))]
        self._asked[key] = question

    async def _question(self, name: str, refused: TaskResult) -> str:
        """What the person is shown: the exact task and arguments, and what the call would touch."""
        spec = self.executor.registry.get(name, MCP, self.grants)
        clean = refused.data.get("params") or {}
        shown = json.dumps(clean, ensure_ascii=False, sort_keys=True)
        impact = None
        if spec is not None and spec.impact is not None:
            language = "zh" if self.zh else "en"
            impact = await asyncio.to_thread(spec.impact_of, self.executor.home, clean, language)
        destructive = refused.data.get("danger") == Danger.DESTRUCTIVE.value
        call = call_described(name, shown, impact, destructive=destructive, zh=self.zh)
        return f"{call}只执行这一次调用吗？" if self.zh else f"{call} Run exactly this call, once?"

    def _no_elicitation(self, name: str, refused: TaskResult) -> str:
        command = self.confirm_command(name, refused.data.get("params") or {})
        if self.zh:
            return (
                f"{name} 需要你确认这次调用，但这个 MCP 客户端不支持 elicitation（无法向你提问）：没有执行。"
                f"请在终端自己运行：{command}"
            )
        return (
            f"{name} needs the person's confirmation of this exact call, and this MCP client cannot ask "
            f"(it declared no elicitation capability): nothing ran. To run it, type it yourself: {command}"
        )

    def confirm_command(self, name: str, params: dict[str, Any]) -> str:
        """The command that runs this call in a terminal, confirmed: with this server's home and
        registry, which a person's shell may not have (a client starts ``tether --home H mcp serve``;
        without them the command would reach another home, where the same task may exist)."""
        words = ["tether", "--home", str(self.executor.home)]
        ref = self.executor.registry.ref
        if ref is not None and ref != DEFAULT_REGISTRY:
            words += ["--registry", ref]
        words += ["task", "run", name, "--params", json.dumps(params, ensure_ascii=False), "--confirm"]
        return shlex.join(words)


def _traced(ctx: ServerRequestContext[Any], name: str) -> dict[str, Any]:
    """A call's span attributes, as the GenAI conventions for MCP servers name them: the span hangs
    under the client's, when its request carries a ``traceparent`` in ``_meta``."""
    return {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "jsonrpc.request.id": None if ctx.request_id is None else str(ctx.request_id),
        "mcp.session.id": _session_id(ctx),
        "mcp.protocol.version": ctx.protocol_version,
    }


def _session_id(ctx: ServerRequestContext[Any]) -> str | None:
    """The streamable HTTP session the request belongs to (none on stdio)."""
    headers = getattr(ctx.request, "headers", None)
    value = headers.get("mcp-session-id") if headers is not None else None
    return value if isinstance(value, str) else None


def can_elicit(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the client declared form elicitation (a bare ``elicitation: {}`` means form)."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def build_server(bridge: Bridge) -> Server[Any]:
    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=(
            "These tools are tether's audited tasks; every call goes through tether's executor. "
            "Destructive calls ask the person first; background tasks return an execution id "
            "(follow with jobs.status, stop with jobs.stop)."
        ),
        get_tool_input_schema=bridge.input_schema,
        on_list_tools=bridge.list_tools,
        on_call_tool=bridge.call_tool,
    )


# -- serving -----------------------------------------------------------------------------------------


async def serve_stdio(executor: Executor, grants: Grants | None = None) -> None:
    """Serve one client on this process's stdin and stdout until it closes them."""
    from mcp.server.stdio import stdio_server

    telemetry.configure(executor.home)  # as [telemetry] says (nothing, by default)
    server = build_server(Bridge(executor, grants))
    async with _relaying(executor), stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(
    executor: Executor,
    *,
    host: str,
    port: int,
    on_ready: Callable[[str, str], None] | None = None,
    grants: Grants | None = None,
) -> None:
    """Serve streamable HTTP at ``/mcp`` until interrupted, behind ``tether serve``'s own checks
    (``web/security.py``): the home's token as a bearer on every request, and on a loopback address
    only requests that name a loopback host. ``on_ready(url, token_file)`` once it serves."""
    from tether.config import WebSettings
    from tether.interfaces.web import security
    from tether.interfaces.web.protocol import Limits
    from tether.interfaces.web.server import bind

    telemetry.configure(executor.home)  # as [telemetry] says (nothing, by default)
    settings = WebSettings.load(executor.home)
    token = security.load_or_create_token(executor.home)
    policy = security.Policy(token=token, loopback=security.is_loopback(host.strip("[]")))
    server = build_server(Bridge(executor, grants))
    app = security.Guard(server.streamable_http_app(host=host.strip("[]")), policy)
    limits = Limits(
        head_timeout_s=settings.request_head_timeout_s,
        body_timeout_s=settings.request_body_timeout_s,
        stall_timeout_s=settings.send_stall_timeout_s,
        max_connections=settings.max_connections,
    )
    sock = bind(host, port)
    try:
        bound = sock.getsockname()[1]
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        url = f"http://{shown}:{bound}{HTTP_PATH}"

        def ready() -> None:
            if on_ready is not None:
                on_ready(url, str(security.token_path(executor.home)))

        async with _relaying(executor):
            from tether.interfaces.web.server import run_uvicorn

            await run_uvicorn(app, limits, sock, lambda _port: ready())
    finally:
        sock.close()


@contextlib.asynccontextmanager
async def _relaying(executor: Executor) -> AsyncIterator[None]:
    """Workers' progress relayed into the event log while serving, so a web page or ``tether events``
    follows MCP calls too (one relay per home: another server's keeps the lock, this one waits)."""
    from tether.execution.progress import ProgressRelay

    relay = asyncio.get_running_loop().create_task(ProgressRelay(executor.runtime).run())
    try:
        yield
    finally:
        relay.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay
