"""The thread commands of the CLI: ``tether threads`` (list, rename, delete) and ``tether trace`` (every
step of a thread, a delegation's steps nested under the call that asked). A thread id may be given by a
unique prefix."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from tether.errors import ConfigError
from tether.interfaces.agent_cli import resolve_thread
from tether.interfaces.base import JsonFlag, app, guarded, load_registry, state
from tether.interfaces.render import out, print_error
from tether.interfaces.turnview import STEP_ICONS

threads_app = typer.Typer(help="Conversation threads: list (the default), rename, delete, private.")


@threads_app.callback(invoke_without_command=True)
def threads_command(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Conversation threads, newest first."""
    if ctx.invoked_subcommand is not None:
        return

    def body() -> int:
        from tether.runtime import Runtime

        with Runtime.open(state.home) as runtime:
            threads = runtime.threads.threads()
            zh = runtime.agent_settings.language == "zh"
        rows = [
            {
                "thread_id": t.thread_id,
                "title": t.title,
                "turns": t.turns,
                "updated_at": t.updated_at,
                "agent": t.agent or "assistant",
                "parent": t.parent,
            }
            for t in threads
        ]
        if as_json:
            print(json.dumps(rows, ensure_ascii=False))
            return 0
        if not rows:
            out.print("还没有对话：tether chat" if zh else "no threads yet: tether chat", markup=False)
            return 0
        _print_threads(rows, zh)
        return 0

    guarded(as_json, body)


@threads_app.command("rename")
def rename_command(
    thread_id: Annotated[str, typer.Argument(help="The thread (or a unique prefix)")],
    title: Annotated[str, typer.Argument(help="Its new title")],
) -> None:
    """Give a thread a new title."""

    def body() -> int:
        from tether.runtime import Runtime

        shown = " ".join(title.split())[:200]
        if not shown:
            raise ConfigError("a title needs at least one visible character")
        with Runtime.open(state.home) as runtime:
            found = resolve_thread(runtime, thread_id)
            runtime.threads.rename(found, shown)
        out.print(f"thread {found} is now {shown!r}", markup=False)
        return 0

    guarded(False, body)


@threads_app.command("delete")
def delete_command(
    thread_id: Annotated[str, typer.Argument(help="The thread (or a unique prefix)")],
    as_json: JsonFlag = False,
) -> None:
    """Delete a thread: its turn is cancelled, its jobs are stopped, then its records go."""
    import asyncio

    def body() -> int:

        from tether.execution.executor import Executor
        from tether.supervisor import conversations, durable
        from tether.tasks.spec import CLI

        with Executor(load_registry(state.registry_ref), home=state.home) as executor:
            runtime = executor.runtime
            found = resolve_thread(runtime, thread_id)
            with durable.client(runtime) as client:
                done = asyncio.run(conversations.delete_thread(runtime, executor, client, found, caller=CLI))
        if as_json:
            print(json.dumps(done, ensure_ascii=False))
        else:
            stopped = len(done["stopped_jobs"])
            out.print(f"deleted thread {found} ({stopped} job(s) stopped)", markup=False)
        return 0

    guarded(as_json, body)


@app.command("trace")
def trace_command(
    thread_id: Annotated[str, typer.Argument(help="The thread to show")],
    as_json: JsonFlag = False,
) -> None:
    """Every step of every turn of a thread; a delegation's own steps nested under the call that
    handed the work over (who asked whom, what it did, what it returned)."""

    def body() -> int:

        from tether.agent.usage import Totals, describe, turn_totals

        given = thread_id
        runtime = _runtime(state.home)
        store = runtime.threads
        zh = runtime.agent_settings.language == "zh"
        found = given if store.load(given) is not None else None
        if found is None and len(given) >= 3:
            matches = store.ids_with_prefix(given, 2)
            found = matches[0] if len(matches) == 1 else None
        if found is None:
            hint = ""
            if runtime.runs.get(given) is not None:  # a goal or flow run's id: its own command shows it
                hint = f"; {given[:80]!r} is a run: `tether flow show {given[:80]}` shows its steps"
            print_error(f"no thread {given[:80]!r}{hint}", as_json=as_json, code="not_found")
            return 2
        thread = found
        steps = _step_tree(store, thread)
        turns = turn_totals(store, thread)  # each turn's model calls, its delegations' included
        total = Totals()
        for each in turns.values():
            total.add(each)
        if as_json:
            usage = {
                "turns": [{"turn": n, **t.to_dict()} for n, t in sorted(turns.items())],
                "total": total.to_dict(),
            }
            print(json.dumps({"thread_id": thread, "steps": steps, "usage": usage}, ensure_ascii=False))
            return 0
        _print_steps(steps, "", zh, turns)
        if len(turns) > 1:
            out.print(f"Σ {'全部' if zh else 'all turns'}: {describe(total, zh=zh)}", markup=False)
        return 0

    guarded(as_json, body)


MAX_TRACE_DEPTH = 8


def _step_tree(store: Any, thread: str, depth: int = 0) -> list[dict[str, Any]]:
    """A thread's steps; a delegation's step carries its own thread's steps under ``delegation``; an
    agent's proactive message (a turn of its own, with no steps) is a ``proactive`` step."""
    from tether.store.threads import PROACTIVE

    steps = [s.to_dict() for s in store.steps(thread)]
    said = [
        {"turn": t.turn, "index": 0, "kind": PROACTIVE, "text": t.final, "at": t.started_at}
        for t in store.turns_with_status(thread, PROACTIVE)
    ]
    steps = sorted(steps + said, key=lambda s: (s["turn"], s["index"]))
    for s in steps:
        child = ((s.get("result") or {}).get("data") or {}).get("thread_id") if s["kind"] == "tool" else None
        if isinstance(child, str) and child != thread and depth + 1 < MAX_TRACE_DEPTH:
            s["delegation"] = {"thread_id": child, "steps": _step_tree(store, child, depth + 1)}
    return steps


def _print_steps(steps: list[dict[str, Any]], indent: str, zh: bool, turns: dict[int, Any] | None) -> None:
    """Each step a line (a model call's cost after it); with ``turns``, each turn's totals after its
    last step (a delegated thread's steps show their own calls; the totals of the turn above include
    them)."""
    from tether.agent.usage import calls_of, describe, describe_call

    for position, s in enumerate(steps):
        head = f"{indent}{s['turn']}:{s['index']:<2} {STEP_ICONS.get(s['kind'], '·')} {s['kind']:<12}"
        cost = "".join(f"  [{describe_call(c, zh=zh)}]" for c in calls_of(s))
        if s["kind"] == "tool":
            result = s["result"] or {}
            args = json.dumps(s["args"], ensure_ascii=False)
            shown = f"{s['tool']} {args} → {result.get('status')}: {result.get('message', '')}"
            out.print(f"{head} {shown}", markup=False)
        elif s["kind"] == "model" and s["args"]:
            names = ", ".join(c["name"] for c in s["args"]["tool_calls"])
            out.print(f"{head} → {names}{cost}", markup=False)
        else:
            out.print(f"{head} {s['text']}{cost}", markup=False)
        if "delegation" in s:
            out.print(f"{indent}     └─ in thread {s['delegation']['thread_id']}:", markup=False)
            _print_steps(s["delegation"]["steps"], indent + "     │ ", zh, None)
        last = position + 1 == len(steps) or steps[position + 1]["turn"] != s["turn"]
        if turns is not None and last and s["turn"] in turns:
            word = f"第 {s['turn']} 轮" if zh else f"turn {s['turn']}"
            out.print(f"{indent}Σ {word}: {describe(turns[s['turn']], zh=zh)}", markup=False)


@threads_app.command("private")
def private_command(
    thread_id: Annotated[str, typer.Argument(help="The thread (or a unique prefix of its id)")],
    off: Annotated[bool, typer.Option("--off", help="Let it be remembered again from now on")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Keep a thread out of memory: what it said is forgotten, and nothing more from it is kept or
    noted (`--off` undoes it for what comes next)."""
    from tether.store.memories import make_private

    def body() -> int:
        from tether.runtime import Runtime

        with Runtime.open(state.home) as runtime:
            found = resolve_thread(runtime, thread_id)
            if not make_private(runtime.threads, runtime.memories, found, not off):
                raise ConfigError(f"no thread {thread_id[:80]!r}")
        if as_json:
            print(json.dumps({"thread_id": found, "private": not off}))
        else:
            out.print(f"thread {found} is {'no longer private' if off else 'private'}", markup=False)
        return 0

    guarded(as_json, body)


# The headers of `tether threads`, in the home's language ([agent].language).
THREAD_HEADERS = {
    "en": ("thread", "turns", "updated", "agent", "title"),
    "zh": ("对话", "轮数", "更新于", "智能体", "标题"),
}


def _print_threads(rows: list[dict[str, Any]], zh: bool) -> None:
    """One thread a line: the id whole, the number of turns right-aligned under its header (no
    "1 turns"), the title last, ending in "…" where the terminal ends; columns aligned by display
    width, so a Chinese title or agent name lines up like an English one."""
    from tether.interfaces.render import human_time
    from tether.interfaces.tables import Column, print_table

    thread, turns, updated, agent, title = THREAD_HEADERS["zh" if zh else "en"]
    columns = [
        Column(header=thread),
        Column(header=turns, kind="number", drop=2),
        Column(header=updated, drop=3),
        Column(header=agent, drop=4),
        Column(header=title, kind="clip", drop=1),
    ]
    cells = [
        [r["thread_id"], str(r["turns"]), human_time(r["updated_at"]), r["agent"], r["title"] or ""]
        for r in rows
    ]
    print_table(columns, cells)


def _runtime(home: str | None) -> Any:
    from tether.runtime import Runtime

    return Runtime.open(home)
