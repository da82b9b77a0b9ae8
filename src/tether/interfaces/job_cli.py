"""``tether job list|status|stop|log|prune``: every execution, from any process, through the executor.

A job of another home on the same database is listed and shown read-only, with the host it runs on;
stopping it is left to that home (exit code 2 says where it runs).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from tether.interfaces.base import JsonFlag, guarded, open_executor, registry, state
from tether.interfaces.render import (
    STATUS_STYLE,
    err,
    human_time,
    out,
    print_error,
    print_result,
    progress_text,
    visible,
)

if TYPE_CHECKING:
    from tether.execution.executor import Executor
    from tether.execution.jobs import Pruned
    from tether.tasks.result import TaskResult

job_app = typer.Typer(
    help="List, inspect and stop jobs (any execution, from any process).", no_args_is_help=True
)


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
    from tether.interfaces.tables import Column, print_table
    from tether.tasks.result import TaskStatus
    from tether.tasks.spec import CLI

    def body() -> int:
        with open_executor() as executor:
            results = executor.jobs_for(CLI, active=active, limit=limit, before=before)
        if as_json:
            print(json.dumps([r.model_dump(mode="json") for r in results], ensure_ascii=False))
            return 0
        others = any(r.data.get("elsewhere") for r in results)
        columns = [
            Column(header="execution"),
            Column(header="task"),
            Column(header="status", color=lambda value: STATUS_STYLE.get(value, "")),
            Column(header="started", drop=3),
            *([Column(header="host", kind="wrap", drop=1)] if others else []),  # blank: this home's
            Column(header="message", kind="wrap", drop=2),
        ]
        rows = []
        for r in results:
            said = progress_text(r.data.get("progress")) if r.status is TaskStatus.RUNNING else r.message
            said = said.removeprefix(f"{r.task_id}: ")  # the task column names it already
            where = [str((r.data.get("elsewhere") or {}).get("host") or "")] if others else []
            started = human_time(r.data.get("created_at", ""))
            rows.append([r.execution_id, r.task_id, r.status.value, started, *where, said[:120]])
        if not rows:
            out.print("no jobs" + (" running" if active else " yet"), markup=False)
            return 0
        print_table(columns, rows)
        return 0

    guarded(as_json, body)


def _published_tail(executor: Executor, record: Any, lines: int) -> tuple[str, str]:
    """The tail of another node's job, as that node last published it (every few heartbeats)."""
    from tether.execution.remote import published_tail

    node = record.host or "unknown"
    if not executor.runtime.installation.owns(record.installation) or executor.jobs.peers is None:
        return "", node
    return published_tail(executor.jobs.peers, record.execution_id, lines), node


@job_app.command("prune")
def job_prune(
    older_than_days: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Remove ended jobs that ended more than this many days ago (0: every ended job). Without"
            " it: [store].keep_days, where 0 means no age limit",
        ),
    ] = None,
    keep: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Keep only the newest N ended jobs (0: keep none). Without it: [store].keep_executions,"
            " where 0 means no count limit",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would go")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Remove ended executions (their folders and records) and old events; live jobs are never touched.

    A flag means what it says: --keep 0 removes every ended job, --older-than-days 0 every job that
    has ended. Only the settings' own limits read 0 as "keep forever"."""

    def body() -> int:
        with open_executor() as executor:
            pruned = _prune(executor, older_than_days, keep, dry_run)
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

    guarded(as_json, body)


def _prune(executor: Executor, older_than_days: float | None, keep: int | None, dry_run: bool) -> Pruned:
    """The executor's retention, with a limit given on the command line taken literally (the executor
    reads 0 as "no limit", as its settings do): what is not given comes from ``[store]``."""
    import dataclasses
    import time

    if older_than_days is None and keep is None:
        return executor.prune(dry_run=dry_run)
    store = executor.runtime.store_settings
    days = older_than_days if older_than_days is not None else (store.keep_days or None)
    count = keep if keep is not None else (store.keep_executions or None)
    pruned = executor.jobs.prune(
        older_than_s=None if days is None else days * 86_400, keep=count, dry_run=dry_run
    )
    events = 0
    if not dry_run and store.keep_events:
        before = time.time() - days * 86_400 if days is not None else float("inf")
        events = executor.runtime.events.prune(before_ts=before, keep=store.keep_events)
    return dataclasses.replace(pruned, events=events)


@job_app.command("status")
def job_status(
    execution_id: Annotated[str, typer.Argument(help="The execution id")], as_json: JsonFlag = False
) -> None:
    """Show a job's current state, pid, times and latest progress. A live job of another home on the
    same database is shown as that home last recorded it, with where it runs (exit code 2)."""
    import asyncio

    from tether.tasks.spec import CLI

    def body() -> int:
        with open_executor() as executor:
            result = asyncio.run(executor.control(execution_id, "status", caller=CLI))
        return _show_job(result, as_json)

    guarded(as_json, body)


@job_app.command("stop")
def job_stop(
    execution_id: Annotated[str, typer.Argument(help="The execution id")], as_json: JsonFlag = False
) -> None:
    """Stop a job: cooperatively, then SIGINT, then kill its process tree. An ended job is left as it is;
    a job of another home on the same database is left to it (this says where it runs; exit code 2)."""
    import asyncio

    from tether.tasks.spec import CLI

    def body() -> int:
        with open_executor() as executor:
            result = asyncio.run(
                executor.control(execution_id, "stop", caller=CLI, reason="asked from the command line")
            )
        return _show_job(result, as_json)

    guarded(as_json, body)


def _show_job(result: TaskResult, as_json: bool) -> int:
    """Print a job's status, or what a stop did; the exit code: 2 for no such job, and for a live job of
    another installation (its worker is out of this home's reach: it is acted on where it runs)."""
    from tether.tasks.result import TaskStatus

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


@job_app.command("log")
def job_log(
    execution_id: Annotated[str, typer.Argument(help="The execution id (or a unique prefix)")],
    lines: Annotated[int, typer.Option("--lines", "-n", min=1, max=10_000)] = 50,
    as_json: JsonFlag = False,
) -> None:
    """The last lines of a job's log."""
    import asyncio

    from tether.tasks.result import TaskStatus
    from tether.tasks.spec import CLI

    def body() -> int:
        from tether.execution.executor import Executor
        from tether.execution.protocol import ExecutionPaths, log_tail

        with Executor(registry(), home=state.home) as executor:
            result = asyncio.run(executor.control(execution_id, "status", caller=CLI))
            if result.status is TaskStatus.NOT_FOUND:
                print_error(result.message, as_json=as_json, code="not_found")
                return 2
            record = executor.store.get(result.execution_id)
            node = None
            if record is not None and not executor.jobs.mine(record):
                text, node = _published_tail(executor, record, lines)  # only its node reads its log
            else:
                text = log_tail(ExecutionPaths.of(executor.runtime.home, result.execution_id), lines)
        if as_json:
            shown = {"execution_id": result.execution_id, "text": text, **({"node": node} if node else {})}
            print(json.dumps(shown, ensure_ascii=False))
        elif not text:  # an empty log is removed with its worker: nothing to print, say so
            print(f"job {result.execution_id} logged nothing")
        else:
            print(visible(text))  # a worker's log is outside text
        return 0

    guarded(as_json, body)
