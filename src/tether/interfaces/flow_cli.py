"""Goal runs from the command line: ``tether flow validate|plan|run|show|list|approve|reject|edit|
resume|cancel``, ``tether goal`` and ``tether worker`` (an executor of goal runs).

``validate`` loads a flow file and lists every problem (exit 2) or says it can run (exit 0); ``plan``
turns a goal into a plan and prints it as a flow file (``-o FILE`` writes it), so a person can read,
edit and keep it; ``run`` and ``goal`` start a durable run and follow it (``--detach``: print its id).
The ``flow`` group is added to the app by ``cli.py``; ``goal`` and ``worker`` are top-level commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tether.interfaces.base import JsonFlag, app, fail, guarded, registry, state
from tether.interfaces.render import err, out

if TYPE_CHECKING:
    from tether.supervisor.service import Verb

flow_app = typer.Typer(
    help="Plans as DAGs of tasks: check flow files, turn goals into plans.", no_args_is_help=True
)

DetachFlag = Annotated[
    bool, typer.Option("--detach", help="Print the run id and return; an executor runs it in the background.")
]
RunArg = Annotated[str, typer.Argument(help="A run id (or a unique prefix)")]
TaskArg = Annotated[str, typer.Argument(help="The task that waits for you")]


def plan_goal(goal: str, reg: Any) -> tuple[Any, str]:
    """The plan for ``goal`` by the home's model (milestones), or the offline planner (direct calls)."""
    import asyncio

    from tether.models.factory import model_from_settings
    from tether.runtime import Runtime
    from tether.supervisor.planner import plan_goal as plan_with

    with Runtime.open(state.home) as rt:
        model = model_from_settings(rt.home, rt.model_settings, resilience=rt.resilience)
        plan, note = asyncio.run(plan_with(goal, reg, model, home=rt.home))
    label = getattr(model, "name", "offline") or "offline"
    return plan, f"{label}; {note}" if note else label


@flow_app.command("validate")
def validate_command(
    path: Annotated[Path, typer.Argument(help="A flow file (YAML or JSON)")], as_json: JsonFlag = False
) -> None:
    """Check a flow file against the registry: every problem, each named."""

    def body() -> int:
        from tether.errors import PlanError
        from tether.supervisor import flowfile

        try:
            plan = flowfile.load(path, registry())
        except PlanError as exc:
            if as_json:
                print(
                    json.dumps(
                        {"valid": False, "problems": exc.data.get("problems", []), "error": exc.message},
                        ensure_ascii=False,
                    )
                )
            else:
                from tether.interfaces.render import print_error

                problems = exc.data.get("problems") or []
                print_error(
                    exc.message if not problems else f"{path}: {len(problems)} problem(s)",
                    as_json=False,
                    code="plan",
                )
                for problem in problems:
                    task = f"{problem['task']}: " if problem.get("task") else ""
                    out.print(f"  - {task}{problem['problem']}", markup=False, soft_wrap=True)
            return 2
        if as_json:
            print(json.dumps({"valid": True, "tasks": len(plan.tasks)}))
        else:
            out.print(f"{path}: ok, {len(plan.tasks)} task(s) can run", markup=False)
        return 0

    guarded(as_json, body)


@flow_app.command("plan")
def plan_command(
    goal: Annotated[str, typer.Argument(help="The goal, in plain words (中文 or English)")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the flow file here")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Turn a goal into a plan (offline model) and print it as a flow file."""

    def body() -> int:
        import yaml

        plan, _ = plan_goal(goal, registry())
        document = plan.model_dump(mode="json", exclude_defaults=True)
        if as_json:
            print(json.dumps(document, ensure_ascii=False))
        text = yaml.safe_dump(document, allow_unicode=True, sort_keys=False)
        if output is not None:
            output.write_text(text, encoding="utf-8")
            if not as_json:
                out.print(
                    f"wrote {output} ({len(plan.tasks)} tasks); check it: tether flow validate {output}",
                    markup=False,
                )
        elif not as_json:
            print(text, end="")
        return 0

    guarded(as_json, body)


# -- runs ---------------------------------------------------------------------------------------


def runtime() -> Any:
    from tether.runtime import Runtime

    return Runtime.open(state.home)


def drive_and_report(rt: Any, reg: Any, record: Any, as_json: bool, detach: bool) -> int:
    import asyncio

    from tether.interfaces.runview import LinePrinter, exit_code_of
    from tether.supervisor.runner import drive
    from tether.supervisor.service import run_document

    if not as_json:
        planned = f"{len(record.tasks)} task(s)" if record.tasks else "its plan comes first"
        out.print(f"run {record.run_id}: {planned}", markup=False)
    printer = None if (as_json or detach) else LinePrinter()
    try:
        final = asyncio.run(
            drive(
                rt,
                reg,
                record.run_id,
                printer,
                detach=detach,
                registry_ref=state.registry_ref,
                on_note=lambda text: err.print(text, markup=False, soft_wrap=True),
            )
        )
    except KeyboardInterrupt:
        if not as_json:
            out.print(
                f"left run {record.run_id} where it is: `tether worker` (or `tether flow resume "
                f"{record.run_id}`) drives it on; `tether flow cancel {record.run_id}` stops it",
                markup=False,
            )
        raise
    if as_json:
        print(json.dumps(run_document(final, rt.threads), ensure_ascii=False))
    elif detach:
        out.print(f"started in the background: tether flow show {final.run_id} --follow", markup=False)
    else:
        from tether.interfaces.runview import summary
        from tether.supervisor.service import run_usage

        out.print(summary(final, run_usage(rt.threads, final)), markup=False, soft_wrap=True)
    return 0 if detach else exit_code_of(final)


@flow_app.command("run")
def run_command(
    path: Annotated[Path, typer.Argument(help="A flow file (YAML or JSON)")],
    detach: DetachFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Run a flow file to its end (or until a person must decide). Exit 0 completed, 3 waiting
    for a person, 1 failed or cancelled."""

    def body() -> int:
        from tether.supervisor import flowfile, service

        reg = registry()
        plan = flowfile.load(path, reg)
        with runtime() as rt:
            record = service.start(rt, reg, plan)
            return drive_and_report(rt, reg, record, as_json, detach)

    guarded(as_json, body)


@flow_app.command("show")
def show_command(
    run_id: Annotated[str, typer.Argument(help="A run id (or a unique prefix)")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep showing it until it stops.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """A run as a tree: each task's state, attempts, durations and diagnostics."""

    def body() -> int:
        import asyncio

        from tether.interfaces.runview import exit_code_of, tree
        from tether.supervisor import service
        from tether.supervisor.runner import follow as follow_run

        with runtime() as rt:
            record = service.find(rt, run_id)
            if follow and not as_json and record.status == "running":
                from rich.live import Live

                with Live(tree(record), console=out.real(), refresh_per_second=8) as live:
                    record = asyncio.run(follow_run(rt, record.run_id, lambda r: live.update(tree(r))))
                    live.update(tree(record, service.run_usage(rt.threads, record)))  # what it cost
            elif follow:
                record = asyncio.run(follow_run(rt, record.run_id))
            if as_json:
                print(json.dumps(service.run_document(record, rt.threads), ensure_ascii=False))
            elif not follow:
                out.print(tree(record, service.run_usage(rt.threads, record)))
            return exit_code_of(record) if follow else 0

    guarded(as_json, body)


@flow_app.command("list")
def list_command(
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="At most this many, newest first.")
    ] = 20,
    as_json: JsonFlag = False,
) -> None:
    """The runs of this home, newest first."""

    def body() -> int:
        with runtime() as rt:
            runs = rt.runs.list(limit=limit)
            counts = rt.runs.task_counts([r.run_id for r in runs])
        if as_json:
            rows = [
                {"run_id": r.run_id, "status": r.status, "goal": r.goal,
                 "tasks_total": counts.get(r.run_id, (0, 0))[0],
                 "tasks_done": counts.get(r.run_id, (0, 0))[1]}
                for r in runs
            ]  # fmt: skip
            print(json.dumps(rows, ensure_ascii=False))
            return 0
        if not runs:
            out.print('no runs yet: tether goal "…" or tether flow run FILE', markup=False)
            return 0
        from tether.interfaces.tables import Column, print_table

        columns = [
            Column(header="run"),  # whole at any width: people copy it
            Column(header="status"),
            Column(header="done", kind="number", drop=2),
            Column(header="started", drop=3),
            Column(header="goal", kind="wrap", drop=1),
        ]
        rows = []
        for r in runs:
            total, done = counts.get(r.run_id, (0, 0))
            rows.append([
                r.run_id, r.status, f"{done}/{total}", r.created_at[5:16].replace("T", " "),
                r.goal or "(flow file)",
            ])  # fmt: skip
        print_table(columns, rows)
        return 0

    guarded(as_json, body)


def answer_command(verb: Verb, run_id: str, task_id: str, as_json: bool, **extra: Any) -> None:
    def body() -> int:
        from tether.supervisor import durable, service

        with runtime() as rt:
            record = service.answer(rt, registry(), run_id, task_id, verb, **extra)
            live = bool(durable.live_executors(rt.home))
        if as_json:
            print(json.dumps(service.run_document(record), ensure_ascii=False))
            return 0
        state_now = record.task(task_id)
        out.print(
            f"{task_id}: {verb} recorded ({state_now.status if state_now else '?'}); run "
            f"{record.run_id} is {record.status}",
            markup=False,
        )
        if record.status == "running" and not live:
            out.print(
                f"no executor runs now: `tether worker` or `tether flow resume {record.run_id}` drives it on",
                markup=False,
            )
        return 0

    guarded(as_json, body)


@flow_app.command("approve")
def approve_command(run_id: RunArg, task_id: TaskArg, as_json: JsonFlag = False) -> None:
    """Approve what a task waits for: run it, accept its result, or try it again."""
    answer_command("approve", run_id, task_id, as_json)


@flow_app.command("reject")
def reject_command(
    run_id: RunArg,
    task_id: TaskArg,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept with the run)")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Reject it: the task does not run; tasks that needed it are skipped."""
    answer_command("reject", run_id, task_id, as_json, reason=reason)


@flow_app.command("edit")
def edit_command(
    run_id: RunArg,
    task_id: TaskArg,
    args: Annotated[str | None, typer.Option("--args", help="New arguments, a JSON object")] = None,
    description: Annotated[str | None, typer.Option("--description", help="A new description")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Change a waiting task's arguments (or description) and run it."""
    parsed: Any = None
    if args is not None:
        try:
            parsed = json.loads(args)
        except ValueError as exc:
            fail(f"--args is not JSON: {exc}", as_json=as_json)
    answer_command("edit", run_id, task_id, as_json, args=parsed, description=description)


@flow_app.command("resume")
def resume_command(run_id: RunArg, detach: DetachFlag = False, as_json: JsonFlag = False) -> None:
    """Drive a run on: a failed or cancelled one runs its unfinished tasks again."""

    def body() -> int:
        from tether.supervisor import service

        reg = registry()
        with runtime() as rt:
            record, done = service.resume(rt, run_id)
            if not as_json:
                out.print(f"run {record.run_id}: {done}", markup=False)
            if record.status != "running":
                if as_json:
                    print(json.dumps(service.run_document(record, rt.threads), ensure_ascii=False))
                return 0
            return drive_and_report(rt, reg, record, as_json, detach)

    guarded(as_json, body)


@flow_app.command("cancel")
def cancel_command(run_id: RunArg, as_json: JsonFlag = False) -> None:
    """Cancel a run and stop its jobs."""

    def body() -> int:
        from tether.execution.executor import Executor
        from tether.supervisor import service

        with runtime() as rt, Executor(registry(), runtime=rt) as executor:
            record = service.cancel(rt, executor, run_id)
        if as_json:
            print(json.dumps(service.run_document(record), ensure_ascii=False))
        else:
            out.print(f"run {record.run_id}: cancelled", markup=False)
        return 0

    guarded(as_json, body)


@app.command("goal")
def goal_command(
    goal: Annotated[str, typer.Argument(help="What you want done, in plain words (中文 or English)")],
    detach: DetachFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Plan a goal and run it to the end (exit 0 completed, 3 waiting for you, 1 failed)."""

    def body() -> int:
        from tether.errors import ConfigError
        from tether.models.factory import resolve
        from tether.supervisor import service

        reg = registry()
        with runtime() as rt:
            choice = resolve(rt.home, rt.model_settings)
            if choice.provider != "offline":  # a model plans it, in the run's first step
                if not goal.strip():
                    raise ConfigError('say what you want done: tether goal "..."')
                if not as_json:
                    out.print(f"planning with {choice.label} …", markup=False)
                record = service.start_goal(rt, goal)
                return drive_and_report(rt, reg, record, as_json, detach)
        plan, label = plan_goal(goal, reg)
        if not as_json:
            out.print(f"plan ({label}):", markup=False)
            for task in plan.tasks:
                extra = " (asks you first)" if task.review == "before" else ""
                shown = ""
                if task.call is not None:
                    shown = json.dumps(task.call.args, ensure_ascii=False)
                    if task.call.args_from:
                        shown += f" ← {json.dumps(task.call.args_from, ensure_ascii=False)}"
                out.print(
                    f"  {task.id}: {task.call.task if task.call else task.description} {shown}{extra}",
                    markup=False,
                )
        with runtime() as rt:
            record = service.start(rt, reg, plan)
            return drive_and_report(rt, reg, record, as_json, detach)

    guarded(as_json, body)


@app.command("worker")
def worker_command(
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit once no run is left running.")
    ] = False,
    resources: Annotated[
        str,
        typer.Option(
            "--resources",
            help="Resources this worker owns, comma-separated (desktop-1,phone-2): work claiming them "
            "runs only on a worker that owns them, one at a time across all hosts.",
        ),
    ] = "",
    name: Annotated[
        str | None,
        typer.Option("--name", help="This worker's node name, unique among the hosts ([cluster] node)"),
    ] = None,
) -> None:
    """Be this home's executor: run goal and flow runs, turns and the calls for the resources it owns,
    until stopped (Ctrl-C)."""

    def body() -> int:
        import asyncio
        import os

        from tether.supervisor.runner import serve
        from tether.tasks.callers import NAME_RE

        owned = tuple(sorted({r.strip() for r in resources.split(",") if r.strip()}))
        wrong = [r for r in owned if not NAME_RE.match(r)]
        if wrong:
            fail(f"--resources: {wrong[0]!r} is not a resource name (a letter, then letters, digits, "
                 "'_', '.', '-'; at most 64)", as_json=False)  # fmt: skip
        if name is not None:
            os.environ["TETHER_NODE"] = name  # this process's node, and its jobs' (validated as a setting)
        with runtime() as rt:
            try:
                asyncio.run(
                    serve(
                        rt,
                        registry(),
                        until_idle=until_idle,
                        resources=owned,
                        on_start=lambda eid: out.print(
                            f"executor {eid} runs the flows and turns of {rt.home}"
                            + (f" and owns {', '.join(owned)}" if owned else ""),
                            markup=False,
                        ),
                    )
                )
            except KeyboardInterrupt:
                out.print("executor stopped", markup=False)
        return 0

    guarded(False, body)
