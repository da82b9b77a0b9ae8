"""The conversation commands of the CLI: ``tether run``, ``tether chat``, ``tether threads``,
``tether trace`` and ``tether auth``. Registered on the main app by ``cli.py``."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape

from tether.errors import ConfigError
from tether.events import BudgetReviewed, Event, ModelDecided, ToolFinished
from tether.interfaces.render import STATUS_STYLE, err, out
from tether.tasks.result import TaskStatus

auth_app = typer.Typer(
    help="Store API keys in the OS keyring (never in files or arguments).", no_args_is_help=True
)

CONTROL = ("get_task_status", "stop_task")
STEP_ICONS = {"model": "🤔", "tool": "⚙", "confirmation": "❓", "budget": "⏳", "final": "💬"}


def new_thread_id() -> str:
    return f"th-{secrets.token_hex(4)}"


def _session(home: str | None, registry_ref: str, *, detach: bool = False) -> Any:
    from tether.agent.session import ConversationSession
    from tether.execution.executor import Executor
    from tether.models.factory import model_from_settings
    from tether.tasks.spec import Registry

    executor = Executor(Registry.load(registry_ref), home=home)
    executor.maintain()
    runtime = executor.runtime
    model = model_from_settings(runtime.home, runtime.model_settings, resilience=runtime.resilience)
    return ConversationSession(executor, model, detach=detach)


def render_event(event: Event) -> None:
    """The live view of a turn: one line per step."""
    if isinstance(event, ModelDecided) and event.tool_calls:
        names = ", ".join(
            f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in event.tool_calls
        )
        err.print(f"  [dim]{STEP_ICONS['model']} decides:[/] {escape(names)}")
    elif isinstance(event, ToolFinished):
        status = str(event.result.get("status", "?"))
        try:
            style = STATUS_STYLE[TaskStatus(status)]
        except ValueError:
            style = "yellow"
        tool, said = escape(event.tool), escape(str(event.result.get("message", "")))
        err.print(f"  [dim]{STEP_ICONS['tool']}[/] {tool} → [{style}]{escape(status)}[/] {said}")
    elif isinstance(event, BudgetReviewed):
        err.print(f"  [dim]{STEP_ICONS['budget']} budget: {escape(event.reason)}[/]")


JsonFlag = Annotated[bool, typer.Option("--json", help="Print exactly one JSON document.")]


def _guarded(as_json: bool, body: Callable[[], int]) -> None:
    from tether.interfaces.cli import _guard

    _guard(as_json, body)


def register(app: typer.Typer, state: Any) -> None:
    app.add_typer(auth_app, name="auth")

    @app.command("run")
    def run_command(
        goal: Annotated[
            str | None, typer.Argument(help="What you want done, in plain words (中文 or English)")
        ] = None,
        thread: Annotated[str | None, typer.Option(help="Continue this thread (default: a new one)")] = None,
        confirm: Annotated[
            bool,
            typer.Option(
                "--confirm", help="With --thread: you confirm the one call that thread is waiting on"
            ),
        ] = False,
        detach: Annotated[
            bool, typer.Option("--detach", help="Background jobs it starts outlive this command")
        ] = False,
        as_json: JsonFlag = False,
    ) -> None:
        """One turn: the agent plans, calls tools through the executor, and reports.

        A turn that needs your consent ends asking for it; answer with
        `tether run --thread ID --confirm` (exactly that call runs) or `tether run --thread ID "no"`."""

        def body() -> int:
            if confirm and (thread is None or goal is not None):
                raise ConfigError(
                    "--confirm answers the question a thread is waiting on: use "
                    "`tether run --thread ID --confirm` without a message"
                )
            if not confirm and not (goal or "").strip():
                raise ConfigError('say what you want done: tether run "..."')
            session = _session(state.home, state.registry_ref, detach=detach)
            if not as_json:
                session.events.subscribe(render_event)
            try:
                if confirm:
                    assert thread is not None
                    if session.pending(thread) is None:
                        raise ConfigError(f"thread {thread!r} is not waiting for a confirmation")
                    result = asyncio.run(session.confirm(thread, approve=True, source="person:cli"))
                else:
                    assert goal is not None
                    result = asyncio.run(session.send(thread or new_thread_id(), goal))
            finally:
                session.executor.close()
            _print_turn(result, as_json=as_json, detach=detach)
            return 0 if result.status in ("completed", "needs_confirmation") else 1

        _guarded(as_json, body)

    @app.command("chat")
    def chat_command(
        thread: Annotated[str | None, typer.Option(help="Continue this thread (default: a new one)")] = None,
    ) -> None:
        """A conversation. Background jobs keep running between your messages; Ctrl-D or 'exit' leaves."""

        def body() -> int:
            session = _session(state.home, state.registry_ref)
            session.events.subscribe(render_event)
            thread_id = thread or new_thread_id()
            out.print(
                f"[bold]tether chat[/] · thread {thread_id} · model {session.model.name} · 'exit' to leave"
            )
            try:
                while True:
                    try:
                        message = input("you> ").strip()
                    except (EOFError, KeyboardInterrupt):
                        out.print()
                        break
                    if not message:
                        continue
                    if message.lower() in ("exit", "quit", "退出聊天", "再见"):
                        break
                    result = asyncio.run(session.send(thread_id, message))
                    out.print(f"[bold cyan]tether>[/] {escape(result.final)}")
                    if result.status == "needs_confirmation":
                        answer = typer.confirm("confirm / 确认?", default=False)
                        result = asyncio.run(session.confirm(thread_id, approve=answer, source="person:chat"))
                        out.print(f"[bold cyan]tether>[/] {escape(result.final)}")
            finally:
                session.executor.close()
            return 0

        _guarded(False, body)

    @app.command("threads")
    def threads_command(as_json: JsonFlag = False) -> None:
        """Conversation threads, newest first."""

        def body() -> int:
            store = _thread_store(state.home)
            rows = [
                {"thread_id": t.thread_id, "title": t.title, "turns": t.turns, "updated_at": t.updated_at}
                for t in store.threads()
            ]
            if as_json:
                print(json.dumps(rows, ensure_ascii=False))
                return 0
            for row in rows:
                out.print(
                    f"{row['thread_id']}  {row['turns']:>3} turns  {row['updated_at'][:19]}  {row['title']}"
                )
            return 0

        _guarded(as_json, body)

    @app.command("trace")
    def trace_command(
        thread_id: Annotated[str, typer.Argument(help="The thread to show")],
        as_json: JsonFlag = False,
    ) -> None:
        """Every step of every turn of a thread."""

        def body() -> int:
            from tether.interfaces.cli import print_error

            store = _thread_store(state.home)
            if store.load(thread_id) is None:
                print_error(f"no thread {thread_id[:80]!r}", as_json=as_json, code="not_found")
                return 2
            steps = [s.to_dict() for s in store.steps(thread_id)]
            if as_json:
                print(json.dumps({"thread_id": thread_id, "steps": steps}, ensure_ascii=False))
                return 0
            for s in steps:
                head = f"{s['turn']}:{s['index']:<2} {STEP_ICONS.get(s['kind'], '·')} {s['kind']:<12}"
                if s["kind"] == "tool":
                    result = s["result"] or {}
                    args = json.dumps(s["args"], ensure_ascii=False)
                    shown = f"{s['tool']} {args} → {result.get('status')}: {result.get('message', '')}"
                    out.print(f"{head} {shown}", markup=False)
                elif s["kind"] == "model" and s["args"]:
                    names = ", ".join(c["name"] for c in s["args"]["tool_calls"])
                    out.print(f"{head} → {names}", markup=False)
                else:
                    out.print(f"{head} {s['text']}", markup=False)
            return 0

        _guarded(as_json, body)


def _print_turn(result: Any, *, as_json: bool, detach: bool) -> None:
    if as_json:
        document = result.to_dict()
        document["steps"] = [
            {k: s[k] for k in ("index", "kind", "tool", "args", "result")} for s in document["steps"]
        ]
        print(json.dumps(document, ensure_ascii=False))
        return
    out.print(result.final, markup=False)
    out.print(f"[dim]thread {result.thread_id} · {result.status}[/]")
    if result.status == "needs_confirmation":
        err.print(
            f"answer with [bold]tether run --thread {result.thread_id} --confirm[/] "
            f'(or [bold]tether run --thread {result.thread_id} "no"[/])'
        )
    started = [
        s
        for s in result.steps
        if s.kind == "tool" and s.tool not in CONTROL and (s.result or {}).get("status") == "running"
    ]
    if started and not detach:
        err.print(
            "[yellow]note:[/] background jobs started by this command stop when it exits; "
            "use --detach, or `tether chat`"
        )


def _thread_store(home: str | None) -> Any:
    from tether.runtime import Runtime

    return Runtime.open(home).threads


@auth_app.command("set")
def auth_set(
    provider: Annotated[str, typer.Argument(help="e.g. openai, deepseek, qwen")], as_json: JsonFlag = False
) -> None:
    """Store a key for PROVIDER in the OS keyring (typed, not echoed)."""

    def body() -> int:
        from tether.credentials import set_key

        key = typer.prompt(f"API key for {provider}", hide_input=True, err=True)
        set_key(provider, key)
        _say(
            {"provider": provider, "stored": True},
            f"stored the key for {provider} in the OS keyring",
            as_json,
        )
        return 0

    _guarded(as_json, body)


@auth_app.command("show")
def auth_show(provider: Annotated[str, typer.Argument()], as_json: JsonFlag = False) -> None:
    """Where the key for PROVIDER comes from (never the key itself)."""

    def body() -> int:
        from tether.credentials import env_names, key_info

        info = key_info(provider)
        document = {"provider": provider, "source": info.source, "length": info.length}
        if info.source == "none":
            hint = f"no key for {provider}: run `tether auth set {provider}` or set {env_names(provider)[0]}"
            _say(document, hint, as_json)
            return 1
        _say(document, f"{provider}: a key of {info.length} characters, from {info.source}", as_json)
        return 0

    _guarded(as_json, body)


@auth_app.command("delete")
def auth_delete(provider: Annotated[str, typer.Argument()], as_json: JsonFlag = False) -> None:
    """Remove the key for PROVIDER from the OS keyring."""

    def body() -> int:
        from tether.credentials import delete_key

        removed = delete_key(provider)
        text = (
            f"removed the key for {provider}"
            if removed
            else f"there was no key for {provider} in the keyring"
        )
        _say({"provider": provider, "removed": removed}, text, as_json)
        return 0

    _guarded(as_json, body)


def _say(document: dict[str, Any], text: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps(document, ensure_ascii=False))
    else:
        out.print(text, markup=False)
