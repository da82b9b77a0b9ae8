"""The ``tether`` command line.

Every command takes ``--json`` and then prints exactly one JSON document on stdout — also for an
error and for Ctrl-C. Nothing ends in a traceback: a bad registry, settings file or argument, a damaged,
busy or read-only store, a full disk, text that is not UTF-8 and input nested absurdly deep each get one
clear line (``{"error": {"code", "message"}}`` under ``--json``); an unexpected failure says where its
traceback was written. SIGTERM and SIGHUP end a command exactly like Ctrl-C (a job it follows is
stopped first).

Exit codes of ``tether task run``: 0 completed or running, 1 failed or stopped, 2 rejected or not
found; other commands exit 0 on success, 2 on a usage error (unknown job, a live job of another home on the
same database, bad option) and 130 when interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from tether.errors import ConfigError, TetherError, ToolError
from tether.interfaces.render import STATUS_STYLE, err, out, print_result, show_progress
from tether.tasks.result import EXIT_CODES, TaskResult, TaskStatus
from tether.tasks.spec import CLI, NAME_RE, Registry, TaskSpec

DEFAULT_REGISTRY = "tether.toolkits.standard:registry"
REGISTRY_ENV = "TETHER_REGISTRY"

app = typer.Typer(
    name="tether",
    help="Run audited tasks through tether's executor, and control their jobs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
task_app = typer.Typer(help="Run one task through the executor.", no_args_is_help=True)
job_app = typer.Typer(
    help="List, inspect and stop jobs (any execution, from any process).", no_args_is_help=True
)
app.add_typer(task_app, name="task")
app.add_typer(job_app, name="job")
server_app = typer.Typer(
    help="The CLI server: a preloaded process that runs your commands fast (TETHER_CLI_SERVER=0: off).",
    no_args_is_help=True,
)
app.add_typer(server_app, name="server")


JsonFlag = Annotated[bool, typer.Option("--json", help="Print exactly one JSON document.")]


class State:
    home: str | None = None
    registry_ref: str = DEFAULT_REGISTRY


state = State()


def _version(value: bool) -> None:
    if value:
        from tether import __version__

        print(f"tether {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    home: Annotated[
        str | None, typer.Option(help="The tether home (default: $TETHER_HOME or ~/.tether).")
    ] = None,
    registry: Annotated[
        str | None, typer.Option(help=f"Registry as module:attribute (default: ${REGISTRY_ENV} or the demo).")
    ] = None,
) -> None:
    from tether.config import HOME_ENV

    if home is not None and not home.strip():
        raise ConfigError("--home is empty: give the tether home as a folder path")
    if home is None and os.environ.get(HOME_ENV) is not None and not os.environ[HOME_ENV].strip():
        raise ConfigError(f"{HOME_ENV} is set but empty: give the tether home as a folder path, or unset it")
    state.home = home
    state.registry_ref = registry or os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY


def load_registry(ref: str) -> Registry:
    """``Registry.load``, where your own registry lives next to you: when its package is importable
    from nowhere else, the folder the command runs from is (as with uvicorn or celery; a console
    script does not put it on sys.path). Appended, so it never shadows an installed module."""
    import importlib.util

    top = ref.partition(":")[0].split(".")[0]
    with contextlib.suppress(OSError, ValueError, ImportError):
        here = os.getcwd()
        if top and here not in sys.path and importlib.util.find_spec(top) is None:
            sys.path.append(here)
    return Registry.load(ref)


def _registry() -> Registry:
    return load_registry(state.registry_ref)


def _executor() -> Any:
    from tether.execution.executor import Executor

    executor = Executor(_registry(), home=state.home)
    executor.maintain()
    return executor


def print_error(message: str, *, as_json: bool, code: str = "usage") -> None:
    """The one line (or the one JSON document) that every failure of a command ends with."""
    if as_json:
        print(json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False))
    else:
        from rich.markup import escape

        err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


def _fail(message: str, *, as_json: bool, code: str = "usage", exit_code: int = 2) -> NoReturn:
    print_error(message, as_json=as_json, code=code)
    raise typer.Exit(exit_code)


def _guard(as_json: bool, body: Callable[[], int]) -> None:
    """Run a command's body: whatever it raises ends in one line (or one JSON document) and a code."""
    from tether.interfaces.guard import fail_for

    try:
        code = body()
    except typer.Exit:
        raise
    except (Exception, KeyboardInterrupt) as exc:
        code = fail_for(exc, as_json)
    raise typer.Exit(code)


def _spec_row(spec: TaskSpec) -> dict[str, Any]:
    return {
        "task_id": spec.task_id,
        "description": spec.description,
        "aliases": list(spec.aliases),
        "danger": spec.danger.value,
        "background": spec.background,
        "resources": list(spec.resources),
        "requires": list(spec.requires),
        "idempotent": spec.idempotent,
        "isolation": spec.isolation.value,
        "timeout_s": spec.timeout_s,
        "params": spec.params.model_json_schema() if spec.params is not None else None,
    }


@app.command("tasks")
def tasks_command(
    caller: Annotated[
        str, typer.Option(help="See the registry as this caller sees it: agent, cli, mcp, …")
    ] = CLI,
    as_json: JsonFlag = False,
) -> None:
    """List the tasks a caller may run."""

    def body() -> int:
        if not NAME_RE.match(caller):
            raise ConfigError(
                f"--caller must be a caller name such as agent, cli or mcp, got {caller[:40]!r}"
            )
        specs = sorted(_registry().for_caller(caller), key=lambda s: s.task_id)
        if as_json:
            print(json.dumps([_spec_row(spec) for spec in specs], ensure_ascii=False))
            return 0
        out.print(f"[bold]tasks for {caller}[/]  [dim]({len(specs)}; --json for the schemas)[/]")
        for spec in specs:
            mode = "background" if spec.background else spec.isolation.value
            locks = ",".join(spec.resources) or "no lock"
            danger = {"safe": "[green]safe[/]", "caution": "[yellow]caution[/]"}.get(
                spec.danger.value, "[red]destructive[/]"
            )
            out.print(f"\n[bold]{escape(spec.task_id)}[/]  {danger} · {mode} · {escape(locks)}")
            if spec.description:
                out.print(Padding(escape(spec.description), (0, 0, 0, 2), expand=False))
            for line in _param_lines(spec):
                style = "dim" if line.startswith("(") else None
                out.print(Padding(escape(line), (0, 0, 0, 2), expand=False), style=style)
        return 0

    _guard(as_json, body)


def _param_lines(spec: TaskSpec) -> list[str]:
    """One line per parameter: its name, whether it is needed, and what it may be."""
    if spec.params is None:
        return ["(no parameters)"]
    from tether.tasks.catalog import Catalog, InCatalog

    schema = spec.params.model_json_schema()
    required = set(schema.get("required", []))
    lines = []
    for name, info in spec.params.model_fields.items():
        prop = schema.get("properties", {}).get(name, {})
        marker = next((m for m in info.metadata if isinstance(m, InCatalog)), None)
        if marker is not None and marker.depends_on is None and isinstance(marker.catalog, Catalog):
            allowed = ", ".join(marker.catalog.values)
        elif marker is not None:
            allowed = f"depends on {marker.depends_on}: see `tether tasks --json`"
        elif prop.get("enum") or any("enum" in o for o in prop.get("anyOf", [])):
            values = prop.get("enum") or next(o["enum"] for o in prop["anyOf"] if "enum" in o)
            allowed = ", ".join(map(str, values))
        else:
            kind = prop.get("type") or "/".join(str(o.get("type")) for o in prop.get("anyOf", []))
            low, high = prop.get("minimum"), prop.get("maximum")
            span = f" {low}–{high}" if low is not None and high is not None else ""
            allowed = f"{kind}{span}"
        need = "required" if name in required else f"default {info.get_default()!r}"
        lines.append(f"{name} ({need}): {allowed}")
    return lines


def parse_params(pairs: list[str], raw_json: str | None) -> dict[str, Any]:
    """``--params JSON`` first, then each ``-p key=value`` (the value read as JSON when it parses)."""
    params: dict[str, Any] = {}
    if raw_json:
        try:
            loaded = json.loads(raw_json)
        except ValueError as exc:
            raise TetherError(f"--params is not valid JSON: {exc}") from None
        except RecursionError:
            raise TetherError("--params is nested too deeply") from None
        if not isinstance(loaded, dict):
            raise TetherError("--params must be a JSON object, e.g. '{\"attempts\": 3}'")
        params.update(loaded)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise TetherError(f"-p expects key=value, got {pair[:80]!r}")
        try:
            params[key.strip()] = json.loads(value)
        except ValueError:
            params[key.strip()] = value
        except RecursionError:
            raise TetherError(f"-p {key.strip()[:40]}: the value is nested too deeply") from None
    return params


@task_app.command("run")
def task_run(
    task_id: Annotated[str, typer.Argument(help="The task to run, e.g. demo.farm_instance")],
    param: Annotated[list[str] | None, typer.Option("-p", "--param", help="key=value (repeatable)")] = None,
    params_json: Annotated[str | None, typer.Option("--params", help="All params as one JSON object")] = None,
    confirm: Annotated[
        bool, typer.Option("--confirm", help="You confirm a destructive task yourself")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Background tasks: return once running, and outlive this command")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run a task. A background task without --detach is followed until it ends (Ctrl-C stops it).

    --confirm is your consent to exactly this call (this task with these arguments), nothing else."""

    def body() -> int:
        params = parse_params(param or [], params_json)
        with _executor() as executor:
            consent = None
            if confirm:
                try:
                    consent = executor.confirm(task_id, params, caller=CLI, source="person:cli")
                except ToolError:
                    consent = None  # the call itself is refused below, with its reason
            result = _run_following(executor, task_id, params, consent, detach, as_json)
        if as_json:
            print(result.model_dump_json())
        else:
            print_result(result)
        return EXIT_CODES[result.status]

    _guard(as_json, body)


def _run_following(
    executor: Any,
    task_id: str,
    params: dict[str, Any],
    consent: Any,
    detach: bool,
    as_json: bool,
) -> TaskResult:
    live = sys.stdout.isatty() and not as_json
    started: list[str] = []

    async def run() -> TaskResult:
        follower: asyncio.Task[None] | None = None

        def on_start(execution_id: str) -> None:
            started.append(execution_id)
            nonlocal follower
            if live:
                follower = asyncio.get_running_loop().create_task(show_progress(executor, execution_id))

        try:
            result = await executor.execute(
                task_id, params, caller=CLI, confirmation=consent, detach=detach, on_start=on_start
            )
            if result.status is TaskStatus.RUNNING and not detach:
                if live:
                    err.print(f"[cyan]running in the background[/] as {result.execution_id}; Ctrl-C stops it")
                result = await executor.control(result.execution_id, "wait", caller=CLI)
            return result
        finally:
            if follower is not None:
                follower.cancel()

    try:
        return asyncio.run(run())
    except KeyboardInterrupt:
        if not started:
            raise
        execution_id = started[0]
        return asyncio.run(
            executor.control(execution_id, "stop", caller=CLI, reason="interrupted by the person")
        )


@app.command("demo")
def demo_command(
    core: Annotated[
        bool, typer.Option("--core", help="Tour the execution core instead of the agent")
    ] = False,
) -> None:
    """A guided tour on the demo game with the offline model (no key, no network)."""
    from tether.interfaces.tour import run_tour

    _guard(False, lambda: run_tour(_registry(), state.home, core=core))


@job_app.command("list")
def job_list(
    active: Annotated[bool, typer.Option("--active", help="Only pending and running jobs")] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many, newest first")] = 50,
    before: Annotated[
        str | None, typer.Option(help="The next page: jobs older than this execution id")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List jobs, newest first (a page at a time: --before the last id shown). Jobs of other homes on
    the same database are listed too, read-only, with the host they run on."""

    def body() -> int:
        with _executor() as executor:
            results = executor.jobs_for(CLI, active=active, limit=limit, before=before)
        if as_json:
            print(json.dumps([r.model_dump(mode="json") for r in results], ensure_ascii=False))
            return 0
        from tether.interfaces.render import human_time, progress_text

        others = any(r.data.get("elsewhere") for r in results)
        table = Table(title="jobs", box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
        table.add_column("execution", no_wrap=True, min_width=19)  # never cut: people copy it
        table.add_column("task", overflow="fold", max_width=22)
        table.add_column("status", no_wrap=True)
        table.add_column("started", no_wrap=True)
        if others:
            table.add_column("host", overflow="fold", max_width=24)  # blank: this home's
        table.add_column("message", overflow="fold", ratio=1)
        for r in results:
            style = STATUS_STYLE.get(r.status, "white")
            said = progress_text(r.data.get("progress")) if r.status is TaskStatus.RUNNING else r.message
            where = [escape(str((r.data.get("elsewhere") or {}).get("host") or ""))] if others else []
            table.add_row(
                r.execution_id,
                escape(r.task_id),
                f"[{style}]{r.status.value}[/]",
                human_time(r.data.get("created_at", "")),
                *where,
                escape(said[:120]),
            )
        out.print(table)
        return 0

    _guard(as_json, body)


@job_app.command("prune")
def job_prune(
    older_than_days: Annotated[
        float | None,
        typer.Option(min=0, help="Remove ended jobs older than this (default: [store].keep_days)"),
    ] = None,
    keep: Annotated[
        int | None,
        typer.Option(min=0, help="Keep at most this many ended jobs (default: [store].keep_executions)"),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would go")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Remove ended executions (their folders and records) and old events; live jobs are never touched."""

    def body() -> int:
        with _executor() as executor:
            pruned = executor.prune(older_than_days=older_than_days, keep=keep, dry_run=dry_run)
        document = {
            "dry_run": dry_run,
            "executions": len(pruned.executions),
            "events": pruned.events,
            "bytes_freed": pruned.bytes_freed,
        }
        if as_json:
            print(json.dumps(document))
        else:
            verb = "would remove" if dry_run else "removed"
            out.print(
                f"{verb} {len(pruned.executions)} ended executions ({pruned.bytes_freed / 1e6:.1f} MB)"
                + ("" if dry_run else f" and {pruned.events} events")
            )
        return 0

    _guard(as_json, body)


@job_app.command("status")
def job_status(
    execution_id: Annotated[str, typer.Argument(help="The execution id")], as_json: JsonFlag = False
) -> None:
    """Show a job's current state, pid, times and latest progress. A live job of another home on the
    same database is shown as that home last recorded it, with where it runs (exit code 2)."""

    def body() -> int:
        with _executor() as executor:
            result = asyncio.run(executor.control(execution_id, "status", caller=CLI))
        return _show_job(result, as_json)

    _guard(as_json, body)


@job_app.command("stop")
def job_stop(
    execution_id: Annotated[str, typer.Argument(help="The execution id")], as_json: JsonFlag = False
) -> None:
    """Stop a job: cooperatively, then SIGINT, then kill its process tree. An ended job is left as it is;
    a job of another home on the same database is left to it (this says where it runs; exit code 2)."""

    def body() -> int:
        with _executor() as executor:
            result = asyncio.run(
                executor.control(execution_id, "stop", caller=CLI, reason="asked from the command line")
            )
        return _show_job(result, as_json)

    _guard(as_json, body)


def _show_job(result: TaskResult, as_json: bool) -> int:
    """Print a job's status, or what a stop did; the exit code: 2 for no such job, and for a live job of
    another installation (its worker is out of this home's reach: it is acted on where it runs)."""
    elsewhere = result.data.get("elsewhere")
    if as_json:
        print(result.model_dump_json())
    elif elsewhere and result.data.get("stop_refused"):
        print_error(result.message, as_json=False, code="job_elsewhere")
    else:
        shown = {k: v for k, v in result.data.items() if k != "elsewhere"}
        print_result(result.model_copy(update={"data": shown}))
        if elsewhere:
            err.print(f"[yellow]{escape(str(elsewhere.get('message', '')))}[/yellow]", highlight=False)
    if result.status is TaskStatus.NOT_FOUND:
        return 2
    return 2 if elsewhere and not result.status.terminal else 0


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

    _guard(as_json, body)


@server_app.command("status")
def server_status(as_json: JsonFlag = False) -> None:
    """Say whether a CLI server serves your commands, and where."""

    def body() -> int:
        from tether.interfaces import client, zygote

        path = client.server_socket()
        pid, server = zygote.server_state(Path(path)) if path is not None else (None, "disabled")
        row = {"socket": path, "pid": pid, "state": server}
        if as_json:
            print(json.dumps(row))
        elif path is None:
            print(
                f"disabled: commands run in their own process ({client.SERVER_ENV}=0, or no private folder)"
            )
        elif pid is None:
            print(f"off: the next command starts one at {path}")
        else:
            print(f"{server}  pid {pid}  {path}")
        return 0

    _guard(as_json, body)


@server_app.command("stop")
def server_stop(as_json: JsonFlag = False) -> None:
    """Stop the CLI server (commands it runs are seen to their end); the next command starts a new one."""

    def body() -> int:
        from tether.interfaces import client, zygote

        path = client.server_socket()
        pid = zygote.stop(Path(path)) if path is not None else None
        if as_json:
            print(json.dumps({"stopped": pid}))
        else:
            print(f"stopped the server (pid {pid})" if pid is not None else "no server was running")
        return 0

    _guard(as_json, body)


def main(argv: list[str] | None = None) -> None:
    """The console entry point: every way a command can end leaves one line, or one JSON document."""
    from tether.interfaces import guard

    code = guard.run(app, sys.argv[1:] if argv is None else argv)
    guard.settle(code)
    sys.exit(code)


from tether.interfaces import agent_cli  # noqa: E402 - registers run, chat, threads, trace, auth

agent_cli.register(app, state)

from tether.interfaces import flow_cli  # noqa: E402 - registers flow validate, flow plan

flow_cli.register(app, state)

from tether.interfaces import web_cli  # noqa: E402 - registers serve, approvals, job log, events

web_cli.register(app, job_app, state)

from tether.interfaces import artifacts_cli  # noqa: E402 - registers artifacts, artifacts get

artifacts_cli.register(app, state)


if __name__ == "__main__":
    main()
