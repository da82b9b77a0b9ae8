"""The commands about the home and this machine rather than a task: ``tether demo`` (the guided tour),
``tether doctor`` (what to fix), ``tether server status|stop`` (the CLI server) and ``tether auth
set|show|delete`` (keys in the OS keyring).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from tether.interfaces import handoff
from tether.interfaces.base import JsonFlag, app, guarded, registry, state
from tether.interfaces.render import out

server_app = typer.Typer(
    help="The CLI server: a preloaded process that runs your commands fast (TETHER_CLI_SERVER=0: off).",
    no_args_is_help=True,
)
auth_app = typer.Typer(
    help="Store API keys in the OS keyring (never in files or arguments).", no_args_is_help=True
)


@app.command("demo")
def demo_command(
    core: Annotated[
        bool, typer.Option("--core", help="Tour the execution core instead of the agent")
    ] = False,
    files: Annotated[
        bool,
        typer.Option(
            "--files", help="Instead: put a few notes and a report.pdf in the workspace to try the tools on"
        ),
    ] = False,
) -> None:
    """A guided tour on the demo game with the offline model (no key, no network)."""
    from tether.interfaces.tour import run_tour

    if files:
        guarded(False, _demo_files)
    else:
        guarded(False, lambda: run_tour(registry(), state.home, core=core))


def _demo_files() -> int:
    from tether.execution.executor import Executor
    from tether.interfaces.demo_files import make_demo_files
    from tether.toolkits.standard import registry as standard

    with Executor(standard, home=state.home) as executor:
        return make_demo_files(executor)


@app.command("doctor")
def doctor_command(as_json: JsonFlag = False) -> None:
    """Check the setup (home, settings, store, registry, keyring, model) and say what to fix."""

    def body() -> int:
        from tether.interfaces.doctor import FAIL, OK, run_checks

        checks = run_checks(state.home, state.registry_ref)
        if as_json:
            print(json.dumps([c.to_dict() for c in checks], ensure_ascii=False))
        else:
            marks = {OK: "[green]ok  [/]", "warn": "[yellow]warn[/]", FAIL: "[red]fail[/]"}
            from rich.markup import escape

            for c in checks:
                out.print(f"{marks[c.status]} {c.name:<9} {escape(c.detail)}", soft_wrap=True)
                if c.fix:
                    out.print(f"     {'':<9} [bold]→ {escape(c.fix)}[/]", soft_wrap=True)
        return 1 if any(c.status == FAIL for c in checks) else 0

    guarded(as_json, body)


@server_app.command("status")
def server_status(as_json: JsonFlag = False) -> None:
    """Say whether a CLI server serves your commands, and where."""

    def body() -> int:
        path = handoff.server_socket()
        pid, server = handoff.server_state(path) if path is not None else (None, "disabled")
        row = {"socket": path, "pid": pid, "state": server}
        if as_json:
            print(json.dumps(row))
        elif path is None:
            print(
                f"disabled: commands run in their own process ({handoff.SERVER_ENV}=0, or no private folder)"
            )
        elif pid is None:
            print(f"off: the next command starts one at {path}")
        else:
            print(f"{server}  pid {pid}  {path}")
        return 0

    guarded(as_json, body)


@server_app.command("stop")
def server_stop(as_json: JsonFlag = False) -> None:
    """Stop the CLI server (commands it runs are seen to their end); the next command starts a new one."""

    def body() -> int:
        path = handoff.server_socket()
        pid = handoff.stop(path) if path is not None else None
        if as_json:
            print(json.dumps({"stopped": pid}))
        else:
            print(f"stopped the server (pid {pid})" if pid is not None else "no server was running")
        return 0

    guarded(as_json, body)


@auth_app.command("set")
def auth_set(
    provider: Annotated[str, typer.Argument(help="e.g. openai, deepseek, qwen")], as_json: JsonFlag = False
) -> None:
    """Store a key for PROVIDER in the OS keyring: typed without echo in a terminal, or read as one
    line from standard input (`… | tether auth set openai`). Where there is no OS keyring, this says
    so before asking, with the environment variable to set instead."""

    def body() -> int:
        from tether.credentials import refuse_unless_storable, set_key

        refuse_unless_storable(provider)
        set_key(provider, _read_key(provider))
        _say(
            {"provider": provider, "stored": True},
            f"stored the key for {provider} in the OS keyring",
            as_json,
        )
        return 0

    guarded(as_json, body)


def _read_key(provider: str) -> str:
    """The key, typed without echo at a terminal; otherwise the first line of standard input (a pipe
    or a file has no echo to turn off: getpass would warn and print its prompt into the pipe)."""
    import sys

    from tether.errors import CredentialError

    stdin = sys.stdin
    if stdin is not None and stdin.isatty():
        return typer.prompt(f"API key for {provider}", hide_input=True, err=True)
    line = stdin.readline() if stdin is not None else ""
    if not line.strip():
        raise CredentialError(
            f"no key on standard input: pipe it in (`… | tether auth set {provider}`) or run this in a"
            " terminal to type it"
        )
    return line.strip()


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

    guarded(as_json, body)


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

    guarded(as_json, body)


def _say(document: dict[str, Any], text: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps(document, ensure_ascii=False))
    else:
        out.print(text, markup=False)
