"""The API's memory: what an agent remembers (``store/memories.py``) — the facts it noted, with ``q``
a search over what it would recall, and forgetting one. The same as ``tether memory``; a thread is
made private with ``PATCH /api/threads/{id}`` (``{"private": true}``)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Path, Query

from tether.interfaces.web.context import WebContext
from tether.interfaces.web.documents import ApiError, Forgotten, MemoryDoc, MemoryList, not_found
from tether.store.agents import DEFAULT_AGENT
from tether.store.memories import Memory

AgentName = Annotated[str, Query(pattern=r"^[a-z][a-z0-9_-]{0,39}$")]
MAX_ID = 2**62


def _doc(memory: Memory) -> MemoryDoc:
    return MemoryDoc(**memory.to_dict())


def router(ctx: WebContext) -> APIRouter:
    router = APIRouter()
    memories = ctx.runtime.memories

    def agent_named(name: str) -> str:
        if ctx.runtime.agents.get(name) is None:
            names = ", ".join(a.name for a in ctx.runtime.agents.list())
            raise ApiError(400, "invalid", f"no agent {name!r}; agents: {names}")
        return name

    @router.get("/api/memory", response_model=MemoryList)
    def list_memory(
        agent: AgentName = DEFAULT_AGENT,
        q: Annotated[str | None, Query(min_length=1, max_length=2000)] = None,
        limit: Annotated[int, Query(ge=1, le=50)] = 5,
    ) -> MemoryList:
        """The facts ``agent`` noted and how much it remembers; with ``q``, what it would recall for it."""
        name = agent_named(agent)
        facts = [_doc(m) for m in memories.facts(name)]
        hits = None if q is None else [_doc(m) for m in memories.search(name, q, limit=limit)]
        return MemoryList(agent=name, facts=facts, counts=memories.count(name), hits=hits)

    @router.delete("/api/memory/{memory_id}", response_model=Forgotten)
    async def forget_memory(memory_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> Forgotten:
        if not await asyncio.to_thread(memories.forget, memory_id):
            raise not_found(f"no memory #{memory_id}")
        return Forgotten(forgotten=memory_id)

    return router
