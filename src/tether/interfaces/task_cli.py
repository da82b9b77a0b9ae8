"""``tether tasks`` (what a caller may run, with each parameter's allowed values) and ``tether task
run`` (one task through the executor, a background one followed until it ends; Ctrl-C stops it).

Exit codes of ``tether task run``: 0 completed or running, 1 failed or stopped, 2 rejected or not found.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from tether.errors import ConfigError, TetherError, ToolError
from tether.interfaces.base import JsonFlag, app, guarded, open_executor, registry
from tether.interfaces.render import err, out, print_result, show_progress
from tether.tasks.callers import CLI, NAME_RE

if TYPE_CHECKING:
    from tether.tasks.result import TaskResult
    from tether.tasks.spec import TaskSpec

task_app = typer.Typer(help="Run one task through the executor.", no_args_is_help=True)


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
    from rich.padding import Padding

    def body() -> int:
        if not NAME_RE.match(caller):
            raise ConfigError(
                f"--caller must be a caller name such as agent, cli or mcp, got {caller[:40]!r}"
            )
        specs = sorted(registry().for_caller(caller), key=lambda s: s.task_id)
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

    guarded(as_json, body)


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
        what = f" — {info.description}" if info.description else ""
        lines.append(f"{name} ({need}): {allowed}{what}")
    return lines


def parse_params(pairs: list[str], raw_json: str | None) -> dict[str, Any]:
    """``--params JSON`` first, then each ``-p key=value`` (the value read as JSON when it parses)."""
    params: dict[str, Any] = {}
    if raw_json:
        try:
            loaded = json.loads(raw_json)
        except ValueError as exc:
            raise TetherError(f"--params is not valid JSON: {exc}") from exc
        except RecursionError:
            raise TetherError("--params is nested too deeply") from None
        if not isinstance(loaded, dict):
            raise TetherError("--params must be a JSON object, e.g. '{\"attempts\": 3}'")
        params.update(loaded)
    given: dict[str, list[Any]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise TetherError(f"-p expects key=value, got {pair[:80]!r}")
        try:
            read: Any = json.loads(value)
        except ValueError:
            read = value
        except RecursionError:
            raise TetherError(f"-p {key.strip()[:40]}: the value is nested too deeply") from None
        given.setdefault(key.strip(), []).append(read)
    for key, values in given.items():  # -p formats=pptx -p formats=pdf: a list
        params[key] = values[0] if len(values) == 1 else values
    return params


def as_lists(spec: Any, params: dict[str, Any]) -> dict[str, Any]:
    """A list parameter given one plain word or ``a,b`` (``-p formats=pdf``, ``-p formats=pptx,pdf``)
    is that list, as a person means it; everything else is left to validation."""
    if spec is None or spec.params is None:
        return params
    fields = spec.params.model_json_schema().get("properties", {})
    return {
        key: [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, str) and fields.get(key, {}).get("type") == "array"
        else value
        for key, value in params.items()
    }


@task_app.command("run")
def task_run(
    task_id: Annotated[str, typer.Argument(help="The task to run, e.g. demo.farm_instance")],
    param: Annotated[
        list[str] | None, typer.Option("-p", "--param", help="key=value (repeatable; a list: key=a,b)")
    ] = None,
    params_json: Annotated[str | None, typer.Option("--params", help="All params as one JSON object")] = None,
    confirm: Annotated[
        bool, typer.Option("--confirm", help="You confirm a destructive task yourself")
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Background tasks: return once running, and outlive this command")
    ] = False,
    wait_owner: Annotated[
        float,
        typer.Option(
            "--wait-owner",
            min=0,
            max=86_400,
            help="Seconds to wait for a worker to own the resource the task claims (else refused at once)",
        ),
    ] = 0.0,
    as_json: JsonFlag = False,
) -> None:
    """Run a task. A background task without --detach is followed until it ends (Ctrl-C stops it).

    --confirm is your consent to exactly this call (this task with these arguments), nothing else."""
    from tether.tasks.result import EXIT_CODES

    def body() -> int:
        params = parse_params(param or [], params_json)
        with open_executor() as executor:
            params = as_lists(executor.registry.get(task_id, CLI), params)
            consent = None
            if confirm:
                try:
                    consent = executor.confirm(task_id, params, caller=CLI, source="person:cli")
                except ToolError:
                    consent = None  # the call itself is refused below, with its reason
            result = _run_following(executor, task_id, params, consent, detach, as_json, wait_owner)
        if as_json:
            print(result.model_dump_json())
        else:
            print_result(result)
        return EXIT_CODES[result.status]

    guarded(as_json, body)


def _run_following(
    executor: Any,
    task_id: str,
    params: dict[str, Any],
    consent: Any,
    detach: bool,
    as_json: bool,
    wait_owner: float = 0.0,
) -> TaskResult:
    import asyncio

    from tether.tasks.result import TaskStatus

    live = sys.stdout.isatty() and not as_json
    started: list[str] = []  # the execution, once on record (before its worker starts)

    async def run() -> TaskResult:
        follower: asyncio.Task[None] | None = None

        def on_start(execution_id: str) -> None:
            started.append(execution_id)
            nonlocal follower
            if live:
                follower = asyncio.get_running_loop().create_task(show_progress(executor, execution_id))

        try:
            result = await executor.execute(
                task_id, params, caller=CLI, confirmation=consent, detach=detach, on_start=on_start,
                wait_owner_s=wait_owner,
            )  # fmt: skip
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
            raise  # interrupted before anything was on record
        execution_id = started[0]
        stopped = asyncio.run(
            executor.control(execution_id, "stop", caller=CLI, reason="interrupted by the person")
        )
        if stopped.status is TaskStatus.NOT_FOUND:
            raise  # interrupted before anything was on record
        return stopped
