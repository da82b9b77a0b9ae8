"""The API's agents: the team of this store (``store/agents.py``) — list, read, create, change, delete.

Every value is checked by the store, with the same errors as ``tether agents`` (a 400 that names what
is allowed); an unknown agent is a 404. A thread is given to an agent when it is created
(``POST /api/threads`` with ``agent``) and keeps it.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Path

from tether.interfaces.web.context import WebContext
from tether.interfaces.web.documents import AgentDeleted, AgentDoc, AgentInput, Agents, NewAgent, not_found
from tether.store.agents import AgentRecord
from tether.tasks.grants import BUNDLES

AgentName = Annotated[str, Path(pattern=r"^[a-z][a-z0-9_-]{0,39}$")]


def _doc(record: AgentRecord) -> AgentDoc:
    return AgentDoc(**record.to_dict())


def _changes(body: AgentInput) -> dict[str, object]:
    changes = body.model_dump(exclude_none=True, exclude={"name"})
    for key in ("grants", "aliases"):
        if key in changes:
            changes[key] = tuple(changes[key])
    if changes.get("model") == "":
        changes["model"] = None
    if changes.get("language") == "auto":
        changes["language"] = None
    return changes


def router(ctx: WebContext) -> APIRouter:
    router = APIRouter()
    agents = ctx.runtime.agents

    @router.get("/api/agents", response_model=Agents)
    def list_agents() -> Agents:
        return Agents(
            items=[_doc(r) for r in agents.list()], bundles={k: list(v) for k, v in BUNDLES.items()}
        )

    @router.get("/api/agents/{name}", response_model=AgentDoc)
    def get_agent(name: AgentName) -> AgentDoc:
        record = agents.get(name)
        if record is None:
            raise not_found(f"no agent {name!r}")
        return _doc(record)

    @router.post("/api/agents", response_model=AgentDoc, status_code=201)
    async def create_agent(body: NewAgent) -> AgentDoc:
        changes = _changes(body)
        changes.setdefault("grants", ())
        record = AgentRecord(name=body.name, **changes)  # type: ignore[arg-type]
        return _doc(await asyncio.to_thread(agents.create, record))

    @router.patch("/api/agents/{name}", response_model=AgentDoc)
    async def edit_agent(name: AgentName, body: AgentInput) -> AgentDoc:
        if agents.get(name) is None:
            raise not_found(f"no agent {name!r}")
        return _doc(await asyncio.to_thread(agents.edit, name, **_changes(body)))

    @router.delete("/api/agents/{name}", response_model=AgentDeleted)
    async def delete_agent(name: AgentName) -> AgentDeleted:
        """Remove a stored agent (its threads stay); ``assistant`` goes back to its built-in form."""
        if not await asyncio.to_thread(agents.delete, name):
            raise not_found(f"no stored agent {name!r}")
        return AgentDeleted(name=name)

    return router
