"""The HTTP connection of ``tether serve``: uvicorn's h11 protocol with the bounds uvicorn lacks.

uvicorn times out only an idle keep-alive connection (``timeout_keep_alive``, between requests): a
client that sends its request a byte at a time, or that never reads its response, held a socket for as
long as it liked, and 1,500 of them held 1,500. Here (the numbers are ``[web]`` settings,
``config.WebSettings``):

- **Slow requests.** A request's line and headers must arrive within ``request_head_timeout_s`` (of the
  connection, or of the previous response on it), and its body within ``request_body_timeout_s`` of its
  headers. Past that the connection is answered 408 and closed; a body cut short never reaches the app
  as a whole (``security.Guard`` reads it first, and hands nothing on when the client is gone).
- **Responses nobody takes.** A response the client has not taken for ``send_stall_timeout_s`` (its
  buffers are full: it stopped reading) ends the connection, without waiting to flush what is queued.
  The event stream's connections get a small send buffer (``stream_paths``), so a subscriber that stops
  reading fills it after little data (``stream.EventHub`` sends some when its slots are all taken).
- **How many.** At most ``max_connections`` are open. A new one beyond that replaces the connection that
  has been sending its current request the longest (slow, or idle between requests), so a well-behaved
  client always gets in; only when every connection is busy with a received request is the new one
  closed at once. A connection closed with no byte of a request on it gets no answer (see ``_end``);
  one in the middle of its request is answered 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

STREAM_SEND_BUFFER = 16 * 1024  # bytes (the kernel doubles it); plenty for events, little to hide behind
STREAM_WRITE_HIGH = 16 * 1024  # what the event loop itself keeps for a stream before it pauses writing


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    head_timeout_s: float
    body_timeout_s: float
    stall_timeout_s: float
    max_connections: int
    stream_paths: tuple[str, ...] = ()


def protocol_for(limits: Limits) -> type[asyncio.Protocol]:
    """The protocol class to hand uvicorn (``Config(http=...)``) for these limits."""
    return type("TetherHTTPProtocol", (BoundedH11Protocol,), {"limits": limits})


def _answer(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"detail": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class BoundedH11Protocol(H11Protocol):
    """One connection; see the module's docstring. ``limits`` is set by ``protocol_for``."""

    limits: ClassVar[Limits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: Literal["head", "body"] | None = None  # what of a request is still being sent
        self._phase_since = 0.0
        self._deadline: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None
        self._stream = False

    # -- the connection's life ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()
        if len(self._open()) > self.limits.max_connections and not self._make_room():
            self._end(503, "Service Unavailable", "busy", "the server has as many connections as it keeps")

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel(self._deadline)
        self._cancel(self._stall)
        self._deadline = self._stall = None
        self._phase = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()
        if not self._stream and self.scope is not None and self.scope["path"] in self.limits.stream_paths:
            self._small_buffers()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = self.loop.call_later(self.limits.stall_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel(self._stall)
        self._stall = None

    # -- the bounds -----------------------------------------------------------------------------

    def _watch(self) -> None:
        """Follow what the client still owes of its request, with a deadline for each part."""
        state = self.conn.their_state
        phase: Literal["head", "body"] | None = (
            "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        )
        if phase == self._phase:
            return
        self._cancel(self._deadline)
        self._deadline = None
        self._phase = phase
        if phase is None or self.transport is None or self.transport.is_closing():
            return
        self._phase_since = self.loop.time()
        limit = self.limits.head_timeout_s if phase == "head" else self.limits.body_timeout_s
        self._deadline = self.loop.call_later(limit, self._too_slow)

    def _too_slow(self) -> None:
        self._deadline = None
        part = "headers" if self._phase == "head" else "body"
        limit = self.limits.head_timeout_s if self._phase == "head" else self.limits.body_timeout_s
        self._end(
            408, "Request Timeout", "timeout", f"the request's {part} did not arrive within {limit:g} s"
        )

    def _open(self) -> list[BoundedH11Protocol]:
        """The connections that count against the bound (one being closed is on its way out)."""
        return [
            other
            for other in self.connections
            if isinstance(other, BoundedH11Protocol)
            and other.transport is not None
            and not other.transport.is_closing()
        ]

    def _make_room(self) -> bool:
        """Close the connection that has been sending its request the longest; False when none is."""
        waiting = [other for other in self._open() if other is not self and other._phase is not None]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda other: other._phase_since)
        oldest._end(503, "Service Unavailable", "busy", "the server needed this connection for a newer one")
        return True

    def _end(self, status: int, reason: str, code: str, message: str) -> None:
        """Answer ``status`` to a request under way whose response has not started (the client may still
        hear why), then close. The app, if it is reading this request's body, is told the client is gone.

        A connection with no byte of a request gets no answer: it would be read as the answer to
        whatever the client sends next (a kept-alive or preconnected socket); closing it is what
        uvicorn's keep-alive timeout does, and the client opens a new connection."""
        phase, cycle = self._phase, self.cycle
        self._cancel(self._deadline)
        self._deadline = None
        self._phase = None
        if self.transport is None or self.transport.is_closing():
            return
        if phase == "head":  # a new request, partly sent (the previous one, if any, was answered)
            answer = bool(self.conn.trailing_data[0])
        else:  # its body under way: unless the app answered already (a refusal before reading it)
            answer = cycle is not None and not cycle.response_started
        if answer:
            self.transport.write(_answer(status, reason, code, message))
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()

    def _stalled(self) -> None:
        """The client has not taken what was sent for too long: drop it, and what is queued for it.
        Closing would wait for a flush that never comes, and so would the kernel after an abort (it
        keeps an orphaned socket sending to a closed window for minutes): a zero linger resets it."""
        self._stall = None
        if self.transport is None or self.transport.is_closing():
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def _small_buffers(self) -> None:
        self._stream = True
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # A platform that refuses it keeps its own buffer; the stall bound still holds.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SEND_BUFFER)
        self.transport.set_write_buffer_limits(high=STREAM_WRITE_HIGH)

    @staticmethod
    def _cancel(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()
