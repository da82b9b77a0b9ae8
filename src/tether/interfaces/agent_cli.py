"""The conversation commands of the CLI: ``tether run``, ``tether chat``, ``tether threads``,
``tether trace`` and ``tether auth``. Registered on the main app by ``cli.py``."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Annotated, Any

import typer

from tether.events import Event
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
    executor.jobs.recover()
    return ConversationSession(executor, model_from_settings(executor.home), detach=detach)


def render_event(event: Event) -> None:
    """The live view of a turn: one line per step."""
    step = event.payload
    if event.kind == "model":
        calls = (step.get("args") or {}).get("tool_calls") or []
        if calls:
            names = ", ".join(f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in calls)
            err.print(f"  [dim]{STEP_ICONS['model']} decides:[/] {names}")
    elif event.kind == "tool":
        result = step.get("result") or {}
        status = result.get("status", "?")
        try:
            style = STATUS_STYLE[TaskStatus(status)]
        except ValueError:
            style = "yellow"
        message = result.get("message", "")
        err.print(f"  [dim]{STEP_ICONS['tool']}[/] {step.get('tool')} → [{style}]{status}[/] {message}")
    elif event.kind == "budget":
        err.print(f"  [dim]{STEP_ICONS['budget']} budget: {step.get('text')}[/]")


def register(app: typer.Typer, state: Any) -> None:
    app.add_typer(auth_app, name="auth")

    @app.command("run")
    def run_command(
        goal: Annotated[str, typer.Argument(help="What you want done, in plain words (中文 or English)")],
        thread: Annotated[str | None, typer.Option(help="Continue this thread (default: a new one)")] = None,
        confirm: Annotated[
            bool, typer.Option("--confirm", help="You confirm destructive steps up front")
        ] = False,
        detach: Annotated[
            bool, typer.Option("--detach", help="Background jobs it starts outlive this command")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON document.")] = False,
    ) -> None:
        """One turn: the agent plans, calls tools through the executor, and reports."""
        session = _session(state.home, state.registry_ref, detach=detach)
        if not as_json:
            session.events.subscribe(render_event)
        try:
            result = asyncio.run(session.send(thread or new_thread_id(), goal, confirm=confirm))
        finally:
            session.executor.close()
        if as_json:
            document = result.to_dict()
            document["steps"] = [
                {k: s[k] for k in ("index", "kind", "tool", "args", "result")} for s in document["steps"]
            ]
            print(json.dumps(document, ensure_ascii=False))
        else:
            out.print(result.final)
            out.print(f"[dim]thread {result.thread_id} · {result.status}[/]")
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
        raise typer.Exit(0 if result.status in ("completed", "needs_confirmation") else 1)

    @app.command("chat")
    def chat_command(
        thread: Annotated[str | None, typer.Option(help="Continue this thread (default: a new one)")] = None,
    ) -> None:
        """A conversation. Background jobs keep running between your messages; Ctrl-D or 'exit' leaves."""
        session = _session(state.home, state.registry_ref)
        session.events.subscribe(render_event)
        thread_id = thread or new_thread_id()
        out.print(f"[bold]tether chat[/] · thread {thread_id} · model {session.model.name} · 'exit' to leave")
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
                out.print(f"[bold cyan]tether>[/] {result.final}")
                if result.status == "needs_confirmation":
                    answer = typer.confirm("confirm / 确认?", default=False)
                    result = asyncio.run(session.send(thread_id, "yes" if answer else "no"))
                    out.print(f"[bold cyan]tether>[/] {result.final}")
        finally:
            session.executor.close()

    @app.command("threads")
    def threads_command(
        as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON document.")] = False,
    ) -> None:
        """Conversation threads, newest first."""
        store = _thread_store(state.home)
        rows = [
            {"thread_id": t.thread_id, "title": t.title, "turns": t.turns, "updated_at": t.updated_at}
            for t in store.threads()
        ]
        if as_json:
            print(json.dumps(rows, ensure_ascii=False))
            return
        for row in rows:
            out.print(
                f"{row['thread_id']}  {row['turns']:>3} turns  {row['updated_at'][:19]}  {row['title']}"
            )

    @app.command("trace")
    def trace_command(
        thread_id: Annotated[str, typer.Argument(help="The thread to show")],
        as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON document.")] = False,
    ) -> None:
        """Every step of every turn of a thread."""
        store = _thread_store(state.home)
        if store.load(thread_id) is None:
            if as_json:
                print(json.dumps({"error": {"code": "not_found", "message": f"no thread {thread_id!r}"}}))
            else:
                err.print(f"[red]error:[/red] no thread {thread_id!r}")
            raise typer.Exit(2)
        steps = [s.to_dict() for s in store.steps(thread_id)]
        if as_json:
            print(json.dumps({"thread_id": thread_id, "steps": steps}, ensure_ascii=False))
            return
        for s in steps:
            head = f"{s['turn']}:{s['index']:<2} {STEP_ICONS.get(s['kind'], '·')} {s['kind']:<12}"
            if s["kind"] == "tool":
                result = s["result"] or {}
                args = json.dumps(s["args"], ensure_ascii=False)
                out.print(f"{head} {s['tool']} {args} → {result.get('status')}: {result.get('message', '')}")
            elif s["kind"] == "model" and s["args"]:
                names = ", ".join(c["name"] for c in s["args"]["tool_calls"])
                out.print(f"{head} → {names}")
            else:
                out.print(f"{head} {s['text']}")


def _thread_store(home: str | None) -> Any:
    from tether.config import resolve_home
    from tether.store.threads import SqliteThreadStore

    return SqliteThreadStore.in_home(resolve_home(home))


@auth_app.command("set")
def auth_set(provider: Annotated[str, typer.Argument(help="e.g. openai, deepseek, qwen")]) -> None:
    """Store a key for PROVIDER in the OS keyring (typed, not echoed)."""
    from tether.credentials import set_key
    from tether.errors import CredentialError

    key = typer.prompt(f"API key for {provider}", hide_input=True)
    try:
        set_key(provider, key)
    except CredentialError as exc:
        err.print(f"[red]error:[/red] {exc.message}")
        raise typer.Exit(2) from None
    out.print(f"stored the key for {provider} in the OS keyring")


@auth_app.command("show")
def auth_show(provider: Annotated[str, typer.Argument()]) -> None:
    """Where the key for PROVIDER comes from (never the key itself)."""
    from tether.credentials import env_names, key_info

    info = key_info(provider)
    if info.source == "none":
        out.print(f"no key for {provider}: run `tether auth set {provider}` or set {env_names(provider)[0]}")
        raise typer.Exit(1)
    out.print(f"{provider}: a key of {info.length} characters, from {info.source}")


@auth_app.command("delete")
def auth_delete(provider: Annotated[str, typer.Argument()]) -> None:
    """Remove the key for PROVIDER from the OS keyring."""
    from tether.credentials import delete_key

    removed = delete_key(provider)
    out.print(
        f"removed the key for {provider}" if removed else f"there was no key for {provider} in the keyring"
    )
