"""No client can hold ``tether serve``'s sockets: real sockets from this process that send their request a
byte at a time (the headers, or the body) are cut by the server after a bounded time, the number of open
connections is bounded, and a well-behaved request gets in throughout — while the slow ones are held
open and once there are more of them than the server keeps."""

from __future__ import annotations

import contextlib
import errno
import json
import selectors
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.support.helpers import tether_cli, wait_for
from tests.support.webserver import EventReader, Served, serving
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


def test_a_request_refused_before_its_body_is_answered_once_then_cut(served: Served) -> None:
    """The guard refuses a request without the token before reading its body; a client that goes on
    sending that body a byte at a time is still cut, without a second, unasked-for answer."""
    head = (
        b"POST /api/threads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(head)
        one = Slow(sock=sock, opened=time.monotonic(), trickle=b" ")
        sock.setblocking(False)
        while one.closed is None and time.monotonic() - one.opened < BOUND_S:
            _read(one)
            _trickle(one)
            time.sleep(0.2)
    assert one.closed is not None and one.closed - one.opened < BOUND_S
    assert one.answer.startswith(b"HTTP/1.1 401") and one.answer.count(b"HTTP/1.1 ") == 1, one.answer


def _tcp_state(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


TCP_ESTABLISHED = 1


@pytest.mark.timeout(180)
def test_subscribers_that_never_read_are_dropped_and_new_pages_get_in(home: Path) -> None:
    """Connections that opened the event stream and never read took every slot for good; now each
    is dropped once it holds up what the server sends it, a page refused meanwhile is told why, and
    the pages that read keep their streams."""
    slots = 4
    with serving(home, "--max-streams", str(slots), TETHER_SEND_STALL_TIMEOUT_S="2") as served:
        readers = [EventReader(served)]
        assert readers[0].admitted()
        request = (
            "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: {served.http.headers['authorization']}\r\n\r\n"
        ).encode()
        silent = []
        try:
            for _ in range(slots - 1):  # with the reader, every slot is taken
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read
                sock.connect(("127.0.0.1", served.port))
                sock.sendall(request)
                silent.append(sock)
                # Its stream is open once its answer arrives (peeked at: nothing is taken off the socket).
                sock.settimeout(30)
                assert sock.recv(12, socket.MSG_PEEK) == b"HTTP/1.1 200"

            def refused() -> dict[str, str] | None:
                with served.http.stream("GET", "/api/events") as answer:  # 200 would never end: not read
                    return json.loads(answer.read())["detail"] if answer.status_code == 503 else None

            busy = wait_for(refused, 30, "every slot to be taken")
            assert busy["code"] == "busy" and "close a page" in busy["message"], busy
            # New pages keep asking; each silent connection is dropped in turn and a page takes its slot.
            for _ in range(slots - 1):

                def one_more() -> bool:
                    reader = EventReader(served)
                    if reader.admitted():
                        readers.append(reader)
                        return True
                    return False

                wait_for(one_more, 60, "a new page to get a slot")
            assert all(_tcp_state(sock) != TCP_ESTABLISHED for sock in silent)  # reset by the server
            assert all(r.thread.is_alive() and r.failure is None for r in readers)
            assert readers[0].received > 64 * 1024  # the first reader took every probe it was sent
        finally:
            for reader in readers:
                reader.close()
            for sock in silent:
                sock.close()


def test_the_streams_must_leave_connections_for_the_api(home: Path) -> None:
    code, out, err = tether_cli("serve", "--port", "0", "--max-streams", "250", home=home, timeout=60)
    assert code == 2 and "--max-streams 250" in err and "max_connections" in err, (out, err)
    assert "Traceback" not in err
