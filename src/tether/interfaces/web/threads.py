"""The API's threads: list, create, rename, delete, cancel a turn, their messages and steps, and the
questions waiting for a person (approve or deny exactly the call asked about)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query

from tether.agent.session import THREAD_ID_RE
from tether.agent.usage import turn_totals
from tether.interfaces.web.context import (
    AGENT_THREAD,
    CALLER,
    MAX_INT,
    SOURCE,
    PendingId,
    ThreadId,
    WebContext,
)
from tether.interfaces.web.documents import (
    Accepted,
    ApiError,
    Confirmation,
    Confirmations,
    Deleted,
    ImageUpload,
    Message,
    Messages,
    NewMessage,
    NewThread,
    Rename,
    Step,
    Steps,
    Thread,
    ThreadPage,
    TurnCancelled,
    TurnUsage,
    not_found,
)
from tether.store.agents import DEFAULT_AGENT
from tether.store.memories import make_private
from tether.store.threads import PROACTIVE, ThreadState
from tether.supervisor import conversations

# -- threads -------------------------------------------------------------------------------------


def _confirmation(ctx: WebContext, state: ThreadState) -> Confirmation | None:
    found = conversations.question(ctx.runtime, state)
    return None if found is None else Confirmation(**found)


def _thread(ctx: WebContext, state: ThreadState, live: set[str]) -> Thread:
    running = state.thread_id in live or conversations.running(ctx.runtime, state.thread_id)
    return Thread(
        thread_id=state.thread_id,
        title=state.title,
        turns=state.turns,
        created_at=state.created_at,
        updated_at=state.updated_at,
        running=running,
        pending=_confirmation(ctx, state),
        agent=state.agent or "assistant",
        parent=state.parent,
        private=state.private,
    )


def _live(ctx: WebContext) -> set[str]:
    return {thread for _, thread in conversations.live_turns(ctx.client)}


def _images(ctx: WebContext, uploads: list[ImageUpload]) -> list[dict[str, Any]]:
    """The images of a message, decoded, checked by their bytes and kept in the home."""
    import base64
    import binascii

    from tether.agent.images import save_all

    decoded: list[tuple[str, bytes]] = []
    for upload in uploads:
        try:
            decoded.append((upload.name, base64.b64decode(upload.data, validate=True)))
        except (binascii.Error, ValueError) as exc:
            raise ApiError(400, "invalid", f"image {upload.name!r} is not base64: {exc}") from exc
    return save_all(ctx.runtime.home, decoded)


def load_thread(ctx: WebContext, thread_id: str) -> ThreadState:
    state = ctx.runtime.threads.load(thread_id)
    if state is None:
        raise not_found(f"no thread {thread_id!r}")
    return state


def router(ctx: WebContext) -> APIRouter:
    router = APIRouter()
    threads = ctx.runtime.threads

    @router.get("/api/threads", response_model=ThreadPage)
    def list_threads(
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        before: Annotated[str | None, Query(max_length=300, description="the `next` of a page")] = None,
    ) -> ThreadPage:
        cursor = None
        if before is not None:
            at, bar, thread_id = before.partition("|")
            if not bar or not THREAD_ID_RE.match(thread_id):
                raise ApiError(400, "invalid", "`before` takes the `next` value of the previous page")
            cursor = (at, thread_id)
        found = threads.threads(limit=limit + 1, before=cursor)
        live = _live(ctx)
        items = [_thread(ctx, state, live) for state in found[:limit]]
        last = found[limit - 1] if len(found) > limit else None
        return ThreadPage(items=items, next=None if last is None else f"{last.updated_at}|{last.thread_id}")

    @router.post("/api/threads", response_model=Thread, status_code=201)
    def create_thread(body: Annotated[NewThread | None, Body()] = None) -> Thread:
        body = body or NewThread()
        title = " ".join(body.title.split())
        agent = body.agent if body.agent not in (None, DEFAULT_AGENT) else None
        if agent is not None and ctx.runtime.agents.get(agent) is None:
            names = ", ".join(a.name for a in ctx.runtime.agents.list())
            raise ApiError(400, "invalid", f"no agent {agent!r}; agents: {names}")
        state = ThreadState(thread_id=conversations.new_thread_id(), title=title)
        threads.save(state)
        if agent is not None:
            threads.assign(state.thread_id, agent)
        return _thread(ctx, load_thread(ctx, state.thread_id), set())

    @router.get("/api/threads/{thread_id}", response_model=Thread)
    def get_thread(thread_id: ThreadId) -> Thread:
        return _thread(ctx, load_thread(ctx, thread_id), _live(ctx))

    @router.patch("/api/threads/{thread_id}", response_model=Thread)
    def rename_thread(thread_id: ThreadId, body: Rename) -> Thread:
        if body.title is None and body.private is None:
            raise ApiError(400, "invalid", "say what changes: title, private, or both")
        load_thread(ctx, thread_id)  # (404 when there is no such thread)
        if body.title is not None:
            title = " ".join(body.title.split())
            if not title:
                raise ApiError(400, "invalid", "a title needs at least one visible character")
            threads.rename(thread_id, title)
        if body.private is not None:
            make_private(threads, ctx.runtime.memories, thread_id, body.private)
        return _thread(ctx, load_thread(ctx, thread_id), _live(ctx))

    @router.delete("/api/threads/{thread_id}", response_model=Deleted)
    async def delete_thread(thread_id: ThreadId) -> Deleted:
        if await asyncio.to_thread(threads.load, thread_id) is None:
            raise not_found(f"no thread {thread_id!r}")
        done = await conversations.delete_thread(
            ctx.runtime, ctx.executor, ctx.client, thread_id, caller=CALLER
        )
        return Deleted(**done)

    @router.post("/api/threads/{thread_id}/turn/cancel", response_model=TurnCancelled)
    async def cancel_turn(thread_id: ThreadId) -> TurnCancelled:
        """Cancel the thread's running turn, as Ctrl-C does in the CLI: it ends at once (interrupted),
        and the job it was waiting on is stopped. A background job it had handed off goes on."""
        if await asyncio.to_thread(threads.load, thread_id) is None:
            raise not_found(f"no thread {thread_id!r}")
        done = await conversations.cancel_turn(
            ctx.runtime, ctx.executor, ctx.client, thread_id, caller=CALLER
        )
        return TurnCancelled(**done)

    _conversation_routes(router, ctx)
    return router


def _conversation_routes(router: APIRouter, ctx: WebContext) -> None:
    """A thread's messages and steps, and the questions waiting for a person."""
    threads = ctx.runtime.threads

    @router.get("/api/threads/{thread_id}/messages", response_model=Messages)
    def list_messages(thread_id: ThreadId, limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> Messages:
        load_thread(ctx, thread_id)
        items: list[Message] = []
        for turn in threads.turns(thread_id, limit):
            if turn.status != PROACTIVE:  # an agent's proactive message has no message before it
                items.append(Message(turn=turn.turn, role="user", text=turn.message, status=turn.status,
                                     at=turn.started_at))  # fmt: skip
            if turn.status != "running":
                items.append(Message(turn=turn.turn, role="assistant", text=turn.final, status=turn.status,
                                     at=turn.ended_at))  # fmt: skip
        return Messages(items=items)

    @router.post("/api/threads/{thread_id}/messages", response_model=Accepted, status_code=202)
    def post_message(thread_id: ThreadId, body: NewMessage) -> Accepted:
        if not body.text.strip():
            raise ApiError(400, "invalid", "say what you want done")
        kept = _images(ctx, body.images)
        request_id = conversations.submit(
            ctx.runtime, ctx.client, thread_id, message=body.text, source=SOURCE, formats=body.formats,
            images=kept,
        )  # fmt: skip
        return Accepted(thread_id=thread_id, request_id=request_id)

    @router.get("/api/threads/{thread_id}/steps", response_model=Steps)
    def list_steps(thread_id: ThreadId, turn: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None) -> Steps:
        load_thread(ctx, thread_id)
        steps = threads.steps(thread_id, turn)  # read once: one turn's cost does not grow with the thread
        spent = turn_totals(threads, thread_id, steps=steps)
        usage = [TurnUsage(turn=n, **t.to_dict()) for n, t in sorted(spent.items())]
        return Steps(items=[Step(**s.to_dict()) for s in steps], usage=usage)

    @router.get("/api/confirmations", response_model=Confirmations)
    def list_confirmations() -> Confirmations:
        return Confirmations(items=[Confirmation(**q) for q in conversations.questions(ctx.runtime)])

    def answer(thread_id: str, pending_id: str, approve: bool) -> Accepted:
        state = load_thread(ctx, thread_id)
        waiting = None if state.pending is None else str(state.pending.get("id"))
        if thread_id.startswith(AGENT_THREAD):
            waiting = None  # answered through its run, never as a conversation turn
        if waiting != pending_id:
            raise not_found(f"thread {thread_id!r} is not waiting on question {pending_id!r}")
        request_id = conversations.submit(
            ctx.runtime, ctx.client, thread_id, approve=approve, pending_id=pending_id, source=SOURCE
        )
        return Accepted(thread_id=thread_id, request_id=request_id)

    @router.post(
        "/api/threads/{thread_id}/confirmations/{pending_id}/approve",
        response_model=Accepted,
        status_code=202,
    )
    def approve(thread_id: ThreadId, pending_id: PendingId) -> Accepted:
        """Run exactly the call the question is about, once."""
        return answer(thread_id, pending_id, True)

    @router.post(
        "/api/threads/{thread_id}/confirmations/{pending_id}/deny", response_model=Accepted, status_code=202
    )
    def deny(thread_id: ThreadId, pending_id: PendingId) -> Accepted:
        """Decline the call the question is about: it does not run."""
        return answer(thread_id, pending_id, False)
