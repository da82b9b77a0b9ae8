"""``tether memory``: what the agents remember — the facts they noted about you (``memory.remember``) and
the turns of earlier threads they find again — listed, searched and forgotten. A private thread
(``tether threads private ID``) is never remembered."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from tether.errors import ConfigError
from tether.interfaces.base import JsonFlag, guarded, state
from tether.interfaces.render import out

memory_app = typer.Typer(help="What agents remember: facts they noted, earlier turns; search and forget.")

AgentOption = Annotated[
    str | None, typer.Option("--agent", "-a", help="One agent's memories (default: the assistant's)")
]


def _runtime() -> Any:
    from tether.runtime import Runtime

    return Runtime.open(state.home)


def _agent(runtime: Any, name: str | None) -> str:
    from tether.store.agents import DEFAULT_AGENT

    if name is None:
        return DEFAULT_AGENT
    if runtime.agents.get(name) is None:
        names = ", ".join(a.name for a in runtime.agents.list())
        raise ConfigError(f"no agent {name!r}; agents: {names}")
    return name


def _line(memory: dict[str, Any]) -> str:
    where = f"thread {memory['thread_id']}" if memory["thread_id"] else "noted"
    text = " ".join(str(memory["text"]).split())
    return f"#{memory['id']:<6} {memory['said_at'][:10]}  {memory['kind']:<4}  {where:<24} {text[:120]}"


@memory_app.callback(invoke_without_command=True)
def memory_command(ctx: typer.Context, agent: AgentOption = None, as_json: JsonFlag = False) -> None:
    """The facts an agent noted about you, newest first, and how many turns it remembers."""
    if ctx.invoked_subcommand is None:
        _list(agent, as_json)


@memory_app.command("list")
def list_command(agent: AgentOption = None, as_json: JsonFlag = False) -> None:
    """The facts an agent noted about you (the same as `tether memory`)."""
    _list(agent, as_json)


def _list(agent: str | None, as_json: bool) -> None:
    def body() -> int:
        with _runtime() as runtime:
            name = _agent(runtime, agent)
            facts = [m.to_dict() for m in runtime.memories.facts(name)]
            counts = runtime.memories.count(name)
        if as_json:
            print(json.dumps({"agent": name, "facts": facts, "counts": counts}, ensure_ascii=False))
            return 0
        out.print(f"{name}: {counts['fact']} facts, {counts['turn']} turns remembered", markup=False)
        for memory in facts:
            out.print(_line(memory), markup=False)
        if not facts:
            out.print("  no facts noted yet (an agent notes them with memory.remember)", markup=False)
        return 0

    guarded(as_json, body)


@memory_app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="What to look for, in your words (Chinese or English)")],
    agent: AgentOption = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=50, help="At most this many")] = 5,
    as_json: JsonFlag = False,
) -> None:
    """What an agent would recall for these words: turns and facts, best first, with their source."""

    def body() -> int:
        if not query.strip() or len(query) > 2000:
            raise ConfigError("search for 1 to 2000 characters of text")
        with _runtime() as runtime:
            name = _agent(runtime, agent)
            hits = [m.to_dict() for m in runtime.memories.search(name, query, limit=limit)]
        if as_json:
            print(json.dumps({"agent": name, "hits": hits}, ensure_ascii=False))
            return 0
        for memory in hits:
            out.print(_line(memory), markup=False)
        if not hits:
            out.print(f"nothing {name} remembers is about that", markup=False)
        return 0

    guarded(as_json, body)


@memory_app.command("forget")
def forget_command(
    memory_id: Annotated[int, typer.Argument(help="The memory's number (#N in list and search)")],
    as_json: JsonFlag = False,
) -> None:
    """Forget one memory: gone from the list and from what any agent recalls, at once."""

    def body() -> int:
        with _runtime() as runtime:
            gone = runtime.memories.forget(memory_id)
        if not gone:
            raise ConfigError(f"no memory #{memory_id}: see `tether memory list` or `tether memory search`")
        if as_json:
            print(json.dumps({"forgotten": memory_id}))
        else:
            out.print(f"forgot #{memory_id}", markup=False)
        return 0

    guarded(as_json, body)
