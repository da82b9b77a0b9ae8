"""The event log as Server-Sent Events, to many pages at once.

One ``EventHub`` reads the log for everyone: a single poller follows it from its last id and hands each
new batch to every subscriber's bounded queue. A subscriber (one open page) first catches up from the
id it already has (its ``Last-Event-ID``) by reading the log itself, then takes the live batches,
skipping what it sent already — event ids only grow in commit order, so it misses nothing and sees
nothing twice. A subscriber too slow for its queue is not dropped: it falls back to reading the log
from its last id, then rejoins.

The number of subscribers is bounded (``Full``); the HTTP layer answers 503 beyond it. A subscriber that
never reads must not keep its slot for good, yet on a quiet log it is sent almost nothing, so nothing
shows it is not reading: when a page is refused a slot, every subscriber is sent a probe (a comment of
``PROBE_BYTES``, ignored by EventSource; at most every ``PROBE_EVERY_S``). A reader takes it; a
subscriber that does not read soon fills its connection's small buffers and is dropped by the
connection's send bound (``protocol.py``), which frees its slot for the page that retries.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence

from tether.events import Event
from tether.store.events import EventLog

log = logging.getLogger("tether.web")
POLL_S = 0.03
QUEUE_BATCHES = 256
PAGE = 500
HEARTBEAT_S = 5.0  # a ping event at least this often: a page that hears nothing for long knows it is cut off
ENCODED_KEPT = 4096  # recent events' messages, shared by every page that sends them
PROBE_BYTES = 64 * 1024
PROBE_EVERY_S = 2.0
PROBE = b": " + b"-" * (PROBE_BYTES - 4) + b"\n\n"  # an SSE comment: no event, no reconnect
_PROBING: list[Event] = []  # the batch that asks a subscriber to send PROBE (identity, never contents)


class Full(Exception):
    """As many pages are following the log as the server allows."""


class _Subscriber:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[list[Event]] = asyncio.Queue(QUEUE_BATCHES)
        self.lagged = False


class EventHub:
    def __init__(
        self,
        log: EventLog,
        *,
        max_subscribers: int = 64,
        poll_s: float = POLL_S,
        heartbeat_s: float | None = None,
    ) -> None:
        self.log = log
        # TETHER_WEB_HEARTBEAT_S: tests shorten it to see a stalled stream noticed within seconds.
        self.heartbeat_s = heartbeat_s or float(os.environ.get("TETHER_WEB_HEARTBEAT_S", HEARTBEAT_S))
        self.max_subscribers = max_subscribers
        self.poll_s = poll_s
        self._subscribers: set[_Subscriber] = set()
        self._position = 0
        self._task: asyncio.Task[None] | None = None
        self._encoded: OrderedDict[int, bytes] = OrderedDict()  # event id → its message (this log's ids)
        self._probed = -PROBE_EVERY_S

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def encode(self, event: Event | bytes | None) -> bytes:
        """``sse(event)``, encoded once for all the pages that send it (every page gets the same
        events: at 50 pages, encoding per page was most of what an open page cost a turn)."""
        if isinstance(event, bytes):
            return event
        if event is None:
            return ping(self.heartbeat_s)
        if not event.id:
            return sse(event)
        cached = self._encoded.get(event.id)
        if cached is None:
            cached = self._encoded[event.id] = sse(event)
            if len(self._encoded) > ENCODED_KEPT:
                self._encoded.popitem(last=False)
        return cached

    async def start(self) -> None:
        self._position = await asyncio.to_thread(self.log.last_id)
        self._task = asyncio.create_task(self._poll(), name="tether-event-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _poll(self) -> None:
        failures = 0
        while True:
            try:
                batch = await asyncio.to_thread(self.log.read, self._position, limit=PAGE)
            except Exception:  # the database is away for a moment: keep trying, never die silently
                failures += 1
                log.exception("reading the event log failed (%d in a row); retrying", failures)
                await asyncio.sleep(min(5.0, self.poll_s * 2**failures))
                continue
            failures = 0
            if batch:
                self._position = batch[-1].id
                for subscriber in self._subscribers:
                    try:
                        subscriber.queue.put_nowait(batch)
                    except asyncio.QueueFull:
                        subscriber.lagged = True
            if len(batch) < PAGE:
                await asyncio.sleep(self.poll_s)

    def subscribe(self) -> _Subscriber:
        if len(self._subscribers) >= self.max_subscribers:
            self._probe()
            raise Full(f"{self.max_subscribers} pages follow the events already")
        subscriber = _Subscriber()
        self._subscribers.add(subscriber)
        return subscriber

    def _probe(self) -> None:
        """Send every subscriber a probe (see the module's docstring), at most every ``PROBE_EVERY_S``."""
        now = time.monotonic()
        if now - self._probed < PROBE_EVERY_S:
            return
        self._probed = now
        for subscriber in self._subscribers:
            try:
                subscriber.queue.put_nowait(_PROBING)
            except asyncio.QueueFull:
                subscriber.lagged = True  # it is not taking what it is sent already

    def unsubscribe(self, subscriber: _Subscriber) -> None:
        self._subscribers.discard(subscriber)

    async def events(
        self, subscriber: _Subscriber, after: int, topics: Sequence[str] | None = None
    ) -> AsyncIterator[Event | bytes | None]:
        """Every event after ``after`` (of ``topics``, if given) as it is committed; None now and then
        when nothing happened (for a heartbeat); ``PROBE`` when the hub probes its subscribers."""
        sent = after
        catch_up = True
        while True:
            if catch_up or subscriber.lagged:
                subscriber.lagged = False
                _drain(subscriber.queue)
                while True:
                    page = await asyncio.to_thread(self.log.read, sent, limit=PAGE, topics=topics)
                    for event in page:
                        sent = event.id
                        yield event
                    if len(page) < PAGE:
                        break
                catch_up = False
            try:
                batch = await asyncio.wait_for(subscriber.queue.get(), self.heartbeat_s)
            except TimeoutError:
                yield None
                continue
            if batch is _PROBING:
                yield PROBE
                continue
            for event in batch:
                if event.id > sent and (topics is None or event.topic in topics):
                    sent = event.id
                    yield event


def _drain(queue: asyncio.Queue[list[Event]]) -> None:
    while not queue.empty():
        queue.get_nowait()


def ping(every_s: float) -> bytes:
    """The heartbeat: a named event (EventSource never shows a comment to the page) that says how often it
    comes, so the page can tell a quiet log from a stream that stalled or a server that is gone."""
    return f"event: ping\ndata: {json.dumps({'every_s': every_s})}\n\n".encode()


def sse(event: Event | None) -> bytes:
    """One Server-Sent Events message (a comment line for None: keeps proxies from closing the stream)."""
    if event is None:
        return b": keep-alive\n\n"
    data = json.dumps(event.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n".encode()
