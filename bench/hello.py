"""The floor of the web rows: a plain uvicorn app with no framework, no store and no guard, serving a
small page (``/``) and a Server-Sent Events stream of what ``POST /emit`` broadcasts (``/events``)."""

from __future__ import annotations

import asyncio
from typing import Any

PAGE = (
    b"<!doctype html><html><head><meta charset=utf-8><title>hello</title></head>"
    b"<body><h1>hello</h1></body></html>"
)
_subscribers: set[asyncio.Queue[bytes]] = set()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/events":
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        _subscribers.add(queue)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        try:
            await send({"type": "http.response.body", "body": b"retry: 1000\n\n", "more_body": True})
            while True:
                await send({"type": "http.response.body", "body": await queue.get(), "more_body": True})
        finally:
            _subscribers.discard(queue)
    if scope["path"] == "/emit":
        count = int(scope["query_string"] or b"1")
        for n in range(count):
            message = b'id: %d\nevent: tick\ndata: {"n": %d}\n\n' % (n, n)
            for queue in _subscribers:
                queue.put_nowait(message)
        body = b"ok"
    else:
        body = PAGE
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": body})
