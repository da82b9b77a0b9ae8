"""``tether agents``: the team — list, show, create, edit, delete, and the grant bundles to build with.

An agent is a named persona with its own model and tool grants (``store/agents.py``); ``tether run
--agent NAME`` talks to it, and a manager hands work to it with ``agents.delegate``. The default agent,
``assistant``, is today's assistant: editing it stores it, deleting it restores the built-in one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tether.errors import ConfigError
from tether.interfaces.base import JsonFlag, guarded, state
from tether.interfaces.render import out

agents_app = typer.Typer(help="Agents: named personas with their own model and tool grants.")

Description = Annotated[str | None, typer.Option("--description", "-d", help="What it is for, in one line")]
Persona = Annotated[
    str | None, typer.Option("--persona", help="Its role and instructions (its system prompt)")
]
PersonaFile = Annotated[Path | None, typer.Option("--persona-file", help="Read the persona from this file")]
Model = Annotated[
    str | None,
    typer.Option("--model", help="deepseek-chat, provider/model, or offline; '' = the home's [model]"),
]
Language = Annotated[str | None, typer.Option("--language", help="auto, zh or en")]
Grant = Annotated[
    list[str] | None,
    typer.Option(
        "--grant", "-g", help="A bundle (files, research, …), task id or pattern (workspace.*); repeat"
    ),
]
Alias = Annotated[list[str] | None, typer.Option("--alias", help="What people call it (研究助手); repeat")]
Memory = Annotated[str | None, typer.Option("--memory", help="on or off")]
Channel = Annotated[str | None, typer.Option("--channel", help="Where its notices go")]


def _store() -> Any:
    from tether.runtime import Runtime

    return Runtime.open(state.home)


def _changes(
    description: str | None,
    persona: str | None,
    persona_file: Path | None,
    model: str | None,
    language: str | None,
    grant: list[str] | None,
    alias: list[str] | None,
    memory: str | None,
    channel: str | None,
) -> dict[str, Any]:
    if persona is not None and persona_file is not None:
        raise ConfigError("give --persona or --persona-file, not both")
    if persona_file is not None:
        try:
            persona = persona_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {persona_file}: {exc}") from exc
    given = {
        "description": description, "persona": persona, "model": model, "language": language,
        "grants": None if grant is None else tuple(_split(grant)),
        "aliases": None if alias is None else tuple(_split(alias)), "memory": memory, "channel": channel,
    }  # fmt: skip
    changes = {k: v for k, v in given.items() if v is not None}
    if changes.get("model") == "":
        changes["model"] = None
    return changes


def _split(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _show(record: Any, as_json: bool) -> None:
    shown = record.to_dict()
    if as_json:
        print(json.dumps(shown, ensure_ascii=False))
        return
    out.print(f"{shown['name']}{'  (built in)' if shown['builtin'] else ''}", markup=False)
    for key in ("description", "model", "language", "memory", "channel"):
        value = shown[key]
        if key == "model" and not value:
            value = "the home's [model]"
        if value:
            out.print(f"  {key}: {value}", markup=False)
    out.print(
        f"  grants: {', '.join(shown['grants']) or '(none)'}  →  {', '.join(shown['tasks'])}", markup=False
    )
    if shown["aliases"]:
        out.print(f"  called: {', '.join(shown['aliases'])}", markup=False)
    if shown["persona"]:
        out.print("  persona:", markup=False)
        for line in shown["persona"].splitlines()[:20]:
            out.print(f"    {line}", markup=False)


@agents_app.callback(invoke_without_command=True)
def agents_command(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """The agents of this home's store."""
    if ctx.invoked_subcommand is None:
        _list(as_json)


def _list(as_json: bool) -> None:
    def body() -> int:
        with _store() as runtime:
            rows = [record.to_dict() for record in runtime.agents.list()]
        if as_json:
            print(json.dumps(rows, ensure_ascii=False))
            return 0
        for row in rows:
            model = row["model"] or "home model"
            grants = ", ".join(row["grants"]) or "(no grants)"
            out.print(f"{row['name']:<16} {model:<24} {grants:<32} {row['description']}", markup=False)
        return 0

    guarded(as_json, body)


@agents_app.command("list")
def list_command(as_json: JsonFlag = False) -> None:
    """The agents (the same as `tether agents`)."""
    _list(as_json)


@agents_app.command("show")
def show_command(
    name: Annotated[str, typer.Argument(help="The agent's name")], as_json: JsonFlag = False
) -> None:
    """One agent: its model, grants (and the tasks they reach), aliases and persona."""

    def body() -> int:
        with _store() as runtime:
            record = runtime.agents.get(name)
            if record is None:
                names = ", ".join(r.name for r in runtime.agents.list())
                raise ConfigError(f"no agent {name!r}; agents: {names}")
        _show(record, as_json)
        return 0

    guarded(as_json, body)


@agents_app.command("create")
def create_command(
    name: Annotated[str, typer.Argument(help="Its name: lowercase letters, digits, '-' or '_'")],
    description: Description = None,
    persona: Persona = None,
    persona_file: PersonaFile = None,
    model: Model = None,
    language: Language = None,
    grant: Grant = None,
    alias: Alias = None,
    memory: Memory = None,
    channel: Channel = None,
    as_json: JsonFlag = False,
) -> None:
    """A new agent. Without --grant it may use nothing but answer: grant bundles or tasks on purpose."""

    def body() -> int:
        from tether.store.agents import AgentRecord

        changes = _changes(description, persona, persona_file, model, language, grant, alias, memory, channel)
        changes.setdefault("grants", ())
        with _store() as runtime:
            record = runtime.agents.create(AgentRecord(name=name, **changes))
        _show(record, as_json)
        return 0

    guarded(as_json, body)


@agents_app.command("edit")
def edit_command(
    name: Annotated[str, typer.Argument(help="The agent's name")],
    description: Description = None,
    persona: Persona = None,
    persona_file: PersonaFile = None,
    model: Model = None,
    language: Language = None,
    grant: Grant = None,
    alias: Alias = None,
    memory: Memory = None,
    channel: Channel = None,
    as_json: JsonFlag = False,
) -> None:
    """Change what is given; --grant and --alias replace the whole list."""

    def body() -> int:
        changes = _changes(description, persona, persona_file, model, language, grant, alias, memory, channel)
        if not changes:
            raise ConfigError("nothing to change: give --description, --persona, --model, --grant, …")
        with _store() as runtime:
            record = runtime.agents.edit(name, **changes)
        _show(record, as_json)
        return 0

    guarded(as_json, body)


@agents_app.command("delete")
def delete_command(
    name: Annotated[str, typer.Argument(help="The agent's name")], as_json: JsonFlag = False
) -> None:
    """Remove an agent (its threads stay readable). `assistant` goes back to its built-in form."""

    def body() -> int:
        with _store() as runtime:
            gone = runtime.agents.delete(name)
        if not gone:
            raise ConfigError(f"no stored agent {name!r}: see `tether agents`")
        if as_json:
            print(json.dumps({"deleted": name}))
        else:
            out.print(f"agent {name} deleted", markup=False)
        return 0

    guarded(as_json, body)


@agents_app.command("bundles")
def bundles_command(as_json: JsonFlag = False) -> None:
    """The grant bundles tether ships, and the tasks each stands for."""

    def body() -> int:
        from tether.tasks.grants import BUNDLE_TEXT, BUNDLES

        rows = [{"name": n, "patterns": list(p), "about": BUNDLE_TEXT[n]} for n, p in BUNDLES.items()]
        if as_json:
            print(json.dumps(rows, ensure_ascii=False))
            return 0
        for row in rows:
            out.print(f"{row['name']:<11} {', '.join(row['patterns']):<48} {row['about']}", markup=False)
        return 0

    guarded(as_json, body)
