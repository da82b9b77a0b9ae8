"""The API's goal runs: started, followed, answered (approve, reject, edit), cancelled and resumed
through ``supervisor.service``."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query

from tether.interfaces.web.context import CALLER, RunId, TaskId, WebContext
from tether.interfaces.web.documents import (
    Answer,
    ApiError,
    Attempt,
    Call,
    Edit,
    NewRun,
    Resumed,
    Review,
    Reviews,
    Run,
    Runs,
    RunSummary,
    RunTask,
    not_found,
)
from tether.store.runs import RunRecord
from tether.store.threads import ThreadStore
from tether.supervisor import service

# -- goal runs -----------------------------------------------------------------------------------


def _run(run: RunRecord, threads: ThreadStore | None = None) -> Run:
    """The run as the page reads it; with ``threads``, what its model calls cost (``usage``)."""
    tasks_by_id = {t.get("id"): t for t in run.plan.get("tasks", []) if isinstance(t, dict)}
    document = service.run_document(run, threads)
    items = []
    for task in document["tasks"]:
        planned = tasks_by_id.get(task["id"], {})
        call = planned.get("call")
        overrides = task.get("overrides") or {}
        if isinstance(call, dict):
            call = Call(task=str(call.get("task", "")), args=overrides.get("args", call.get("args") or {}))
            title = call.task
        else:
            call = None
            title = str(overrides.get("description") or planned.get("description", ""))[:200]
        items.append(
            RunTask(
                task_id=task["id"],
                title=title,
                status=task["status"],
                attempts=task["attempts"],
                message=task["message"],
                needs=list(planned.get("depends_on", [])),
                review=task["review"],
                diagnostics=task["diagnostics"],
                call=call,
                description=None if call is not None else str(planned.get("description", "")),
                steps=[Attempt(**s) for s in task["steps"]],
                usage=task.get("usage"),
            )
        )
    return Run(
        run_id=run.run_id,
        status=run.status,
        goal=run.goal,
        message=run.message,
        created_at=run.created_at,
        ended_at=run.ended_at,
        tasks=items,
        usage=document.get("usage"),
    )


def _summary(run: RunRecord, counts: tuple[int, int]) -> RunSummary:
    return RunSummary(
        run_id=run.run_id,
        status=run.status,
        goal=run.goal,
        message=run.message,
        created_at=run.created_at,
        ended_at=run.ended_at,
        tasks_total=counts[0],
        tasks_done=counts[1],
    )


def _find_run(ctx: WebContext, run_id: str) -> RunRecord:
    record = ctx.runtime.runs.get(run_id)
    if record is None:
        raise not_found(f"no run {run_id!r}")
    return record


def router(ctx: WebContext) -> APIRouter:
    router = APIRouter()
    runs = ctx.runtime.runs

    @router.get("/api/runs", response_model=Runs)
    def list_runs(limit: Annotated[int, Query(ge=1, le=200)] = 50) -> Runs:
        found = runs.list(limit=limit)
        counts = runs.task_counts([r.run_id for r in found])
        return Runs(items=[_summary(r, counts.get(r.run_id, (0, 0))) for r in found])

    @router.get("/api/reviews", response_model=Reviews)
    def list_reviews() -> Reviews:
        """Every task of a run that waits at its review point (``waiting_for_human``), oldest run first:
        what the page's Approvals list shows next to the conversations' questions."""
        found = [*runs.list(limit=200, status="waiting_for_human"), *runs.list(limit=200, status="running")]
        items: list[Review] = []
        for listed in sorted(found, key=lambda r: r.created_at):
            record = runs.get(listed.run_id)  # (a listed run carries no tasks)
            if record is None or not any(task.status == "waiting_for_human" for task in record.tasks):
                continue
            run = _run(record)
            items += [
                Review(run_id=run.run_id, goal=run.goal, task=task)
                for task in run.tasks
                if task.status == "waiting_for_human"
            ]
        return Reviews(items=items)

    @router.post("/api/runs", response_model=Run, status_code=201)
    async def start_run(body: NewRun) -> Run:
        """Plan a goal and run it: the offline planner plans at once; a model plans in the run's first
        step."""
        goal = body.goal.strip()
        if not goal:
            raise ApiError(400, "invalid", "say what you want done")
        record = await service.begin_goal(ctx.runtime, ctx.registry, goal, offline=ctx.offline)
        return _run(await asyncio.to_thread(_find_run, ctx, record.run_id), ctx.runtime.threads)

    @router.get("/api/runs/{run_id}", response_model=Run)
    def get_run(run_id: RunId) -> Run:
        return _run(_find_run(ctx, run_id), ctx.runtime.threads)

    def answer(run_id: str, task_id: str, verb: service.Verb, **extra: Any) -> Run:
        _find_run(ctx, run_id)
        record = service.answer(ctx.runtime, ctx.registry, run_id, task_id, verb, by=CALLER, **extra)
        return _run(record, ctx.runtime.threads)

    @router.post("/api/runs/{run_id}/tasks/{task_id}/approve", response_model=Run)
    def approve_task(run_id: RunId, task_id: TaskId, body: Annotated[Answer | None, Body()] = None) -> Run:
        return answer(run_id, task_id, "approve", reason=(body or Answer()).reason)

    @router.post("/api/runs/{run_id}/tasks/{task_id}/reject", response_model=Run)
    def reject_task(run_id: RunId, task_id: TaskId, body: Annotated[Answer | None, Body()] = None) -> Run:
        return answer(run_id, task_id, "reject", reason=(body or Answer()).reason)

    @router.post("/api/runs/{run_id}/tasks/{task_id}/edit", response_model=Run)
    def edit_task(run_id: RunId, task_id: TaskId, body: Edit) -> Run:
        return answer(
            run_id, task_id, "edit", args=body.args, description=body.description, reason=body.reason
        )

    @router.post("/api/runs/{run_id}/cancel", response_model=Run)
    async def cancel_run(run_id: RunId) -> Run:
        await asyncio.to_thread(_find_run, ctx, run_id)
        record = await service.cancel_run(ctx.runtime, ctx.executor, run_id, by=CALLER)
        return _run(record, ctx.runtime.threads)

    @router.post("/api/runs/{run_id}/resume", response_model=Resumed)
    def resume_run(run_id: RunId) -> Resumed:
        _find_run(ctx, run_id)
        record, done = service.resume(ctx.runtime, run_id)
        return Resumed(run=_run(record, ctx.runtime.threads), done=done)

    return router
