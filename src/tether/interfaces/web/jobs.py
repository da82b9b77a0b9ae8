"""The API's jobs: listed, queried, stopped and their log tail read, through ``Executor.control`` and
``Executor.jobs_for`` as the caller ``web``."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from tether.execution.protocol import ExecutionPaths, log_tail
from tether.execution.remote import published_tail
from tether.interfaces.web.context import CALLER, ExecutionId, WebContext
from tether.interfaces.web.documents import ERRORS, ApiError, Job, JobLog, Jobs, not_found
from tether.tasks.result import TaskResult, TaskStatus

# -- jobs ----------------------------------------------------------------------------------------


def _job(result: TaskResult) -> Job:
    return Job(**result.model_dump(mode="json"))


async def _visible_job(ctx: WebContext, execution_id: str, action: Literal["status", "stop"]) -> TaskResult:
    result = await ctx.executor.control(
        execution_id, action, caller=CALLER, reason="stopped from the web page" if action == "stop" else None
    )
    if result.status is TaskStatus.NOT_FOUND:
        raise not_found(result.message)
    return result


def router(ctx: WebContext) -> APIRouter:
    router = APIRouter()

    @router.get("/api/jobs", response_model=Jobs)
    def list_jobs(
        active: bool = False,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        origin: Annotated[str | None, Query(max_length=200, pattern=r"^(thread|run|job):[\w.:-]+$")] = None,
    ) -> Jobs:
        found = ctx.executor.jobs_for(CALLER, origin=origin, active=active, limit=limit)
        return Jobs(items=[_job(r) for r in found])

    @router.get("/api/jobs/{execution_id}", response_model=Job)
    async def job_status(execution_id: ExecutionId) -> Job:
        return _job(await _visible_job(ctx, execution_id, "status"))

    @router.post("/api/jobs/{execution_id}/stop", response_model=Job, responses={409: ERRORS[409]})
    async def stop_job(execution_id: ExecutionId) -> Job:
        """Stop a job: cooperatively, then SIGINT, then kill its process tree. A job this home cannot
        stop (it runs on another installation of a shared database, or inside a process and does not
        look for a stop) is answered 409, saying where it runs or when it ends."""
        result = await _visible_job(ctx, execution_id, "stop")
        if result.data.get("stop_refused"):
            raise ApiError(409, "not_stoppable", result.message)
        return _job(result)

    @router.get("/api/jobs/{execution_id}/log", response_model=JobLog, responses={409: ERRORS[409]})
    async def job_log(execution_id: ExecutionId, lines: Annotated[int, Query(ge=1, le=500)] = 50) -> JobLog:
        result = await _visible_job(ctx, execution_id, "status")
        elsewhere = result.data.get("elsewhere")
        if isinstance(elsewhere, dict) and ctx.runtime.installation.owns(elsewhere.get("installation")):
            # Another node of this installation: the tail its node published (only it reads the file).
            peers = ctx.executor.jobs.peers
            text = await asyncio.to_thread(published_tail, peers, result.execution_id, lines) if peers else ""
            return JobLog(execution_id=result.execution_id, text=text)
        if isinstance(elsewhere, dict):  # its log is on the host that ran it
            raise ApiError(409, "elsewhere", str(elsewhere.get("message", "it ran on another host")))
        paths = ExecutionPaths.of(ctx.runtime.home, result.execution_id)
        text = await asyncio.to_thread(log_tail, paths, lines)
        return JobLog(execution_id=result.execution_id, text=text)

    return router
