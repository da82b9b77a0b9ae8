"""No client can hold ``tether serve``'s sockets: real sockets from this process that send their request a
byte at a time (the headers, or the body) are cut by the server after a bounded time, the number of open
connections is bounded, and a well-behaved request gets in throughout — while the slow ones are held
open and once there are more of them than the server keeps."""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.support.webserver import Served, serving
from tether.config import WebSettings

pytestmark = pytest.mark.slow

SLOW_HEADS = 1_200
SLOW_BODIES = 300
TRICKLE_S = 1.0  # each slow client sends one more byte this often
BODY_TIMEOUT_S = 5.0  # the test's [web] request_body_timeout_s (the default is 30 s)
BOUND_S = 45.0  # generous: the defaults cut a slow head after 10 s


@dataclass
class Slow:
    sock: socket.socket
    opened: float
    closed: float | None = None
    answer: bytes = b""
    sent: int = 0
    trickle: bytes = b"X"
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def served(home: Path) -> Iterator[Served]:
    with serving(home, TETHER_REQUEST_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S)) as server:
        yield server


def _open(port: int, head: bytes, trickle: bytes) -> Slow:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setblocking(False)
    if head:
        sock.sendall(head)
    return Slow(sock=sock, opened=time.monotonic(), trickle=trickle)


def _read(slow: Slow) -> None:
    """Take what the server sent; note when it ended the connection."""
    try:
        while True:
            chunk = slow.sock.recv(65536)
            if not chunk:
                slow.closed = slow.closed or time.monotonic()
                return
            slow.answer += chunk
    except BlockingIOError:
        return
    except OSError as exc:
        slow.closed = slow.closed or time.monotonic()
        slow.errors.append(errno.errorcode.get(exc.errno or 0, str(exc)))


def _trickle(slow: Slow) -> None:
    try:
        slow.sock.send(slow.trickle)
        slow.sent += 1
    except BlockingIOError:
        pass
    except OSError:
        slow.closed = slow.closed or time.monotonic()


@pytest.mark.timeout(180)
def test_slow_requests_are_cut_and_a_normal_request_always_gets_in(served: Served) -> None:
    limits = WebSettings()
    assert SLOW_HEADS + SLOW_BODIES > limits.max_connections  # the cap is reached
    port, token = served.port, served.token
    head_start = b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    body_head = (
        f"POST /api/threads HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    ).encode()
    # A new connection for each request: under a flood, an idle kept-alive one is the first to be closed
    # (as a browser does, a client then connects again; httpx would not retry on its own).
    normal = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers=served.http.headers,
        timeout=30,
        limits=httpx.Limits(max_keepalive_connections=0),
    )
    slow: list[Slow] = []
    selector = selectors.DefaultSelector()
    try:
        every = (SLOW_HEADS + SLOW_BODIES) // SLOW_BODIES
        for n in range(SLOW_HEADS + SLOW_BODIES):
            one = _open(port, body_head, b" ") if n % every == 0 else _open(port, head_start, b"X")
            slow.append(one)
            selector.register(one.sock, selectors.EVENT_READ, one)
            if n == 100:  # held open, well below the cap
                assert normal.get("/api/info").status_code == 200
        opened_all = time.monotonic()
        assert normal.get("/api/info").status_code == 200  # past the cap
        answered = 1
        last_trickle = 0.0
        while time.monotonic() - opened_all < BOUND_S + 15:
            for key, _ in selector.select(timeout=0.2):
                _read(key.data)
                if key.data.closed is not None:
                    selector.unregister(key.fileobj)
            now = time.monotonic()
            if now - last_trickle >= TRICKLE_S:
                last_trickle = now
                for one in slow:
                    if one.closed is None:
                        _trickle(one)
                # Well-behaved clients get in while the slow ones are being held and cut.
                assert normal.get("/api/info").status_code == 200
                answered += 1
            if all(one.closed is not None for one in slow):
                break
        still_open = [one for one in slow if one.closed is None]
        assert not still_open, f"{len(still_open)} slow connections still open after {BOUND_S + 15} s"
        late = [one.closed - one.opened for one in slow if one.closed - one.opened > BOUND_S]  # type: ignore[operator]
        assert not late, f"{len(late)} slow connections lasted over {BOUND_S} s (longest {max(late):.0f} s)"
        # Cut with a word of why where the client could still hear it: 408 for the slow, 503 for those
        # that made room for newer connections.
        statuses = {one.answer.split(b" ", 2)[1] for one in slow if one.answer.startswith(b"HTTP/1.1 ")}
        assert statuses <= {b"408", b"503"} and b"408" in statuses, statuses
        for kind in (b"X", b" "):  # slow headers and slow bodies alike
            assert any(o.trickle == kind and o.answer.startswith(b"HTTP/1.1 408") for o in slow), kind
        assert answered >= 5
        assert served.get("/api/threads")["items"] == []  # a cut body never reached the app as a whole
    finally:
        normal.close()
        for one in slow:
            with contextlib.suppress(OSError):
                one.sock.close()
        selector.close()
    assert served.get("/api/info")["version"]  # and the server is well
