"""The API's live events: the persisted event log as Server-Sent Events, resumable with
``Last-Event-ID`` and filtered by topic (``stream.EventHub`` does the reading)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from tether.interfaces.web.context import MAX_INT, WebContext
from tether.interfaces.web.documents import ApiError
from tether.interfaces.web.stream import EventHub, Full

TOPIC = r"^(thread|run|job):[A-Za-z0-9_.:-]{1,200}$"


def router(ctx: WebContext, hub: EventHub) -> APIRouter:
    router = APIRouter()

    @router.get(
        "/api/events",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "Server-Sent Events"}},
    )
    async def events(
        request: Request,
        after: Annotated[int | None, Query(ge=0, le=MAX_INT, description="send events after this id")] = None,
        topic: Annotated[list[str] | None, Query(max_length=20, description="only these topics")] = None,
    ) -> StreamingResponse:
        """Every event of the log after ``after`` (or the ``Last-Event-ID`` header, which wins), then
        each new one as it is committed, as Server-Sent Events (``id``, ``event`` = its kind, ``data``
        = its JSON). Without either, from now on."""
        for name in topic or []:
            if not re.match(TOPIC, name):
                raise ApiError(400, "invalid", "a topic is thread:<id>, run:<id> or job:<id>")
        resume = request.headers.get("last-event-id")
        if resume is not None:
            if not re.fullmatch(r"[0-9]{1,18}", resume):
                raise ApiError(400, "invalid", "Last-Event-ID must be the id of an event")
            after = int(resume)
        if after is None:
            after = await asyncio.to_thread(ctx.runtime.events.last_id)
        try:
            subscriber = hub.subscribe()
        except Full as exc:
            raise ApiError(503, "busy", f"{exc}; close a page and try again") from exc

        async def body() -> AsyncIterator[bytes]:
            try:
                yield b"retry: 1000\n\n" + hub.encode(None)  # a ping at once: how often the next ones come
                async for event in hub.events(subscriber, after, topic):
                    yield hub.encode(event)
            finally:
                hub.unsubscribe(subscriber)

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(body(), media_type="text/event-stream", headers=headers)

    return router
