"""``tether serve``'s guard, tried from the outside: host, token, cookie, cross-site requests, CORS, body
and stream bounds, security headers; no secret in the page, the API or the event stream."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.support.helpers import wait_for
from tests.support.webserver import Served, serving, sse_events
from tether.interfaces.web.security import token_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("web-guard") / "home"
    home.mkdir()
    with serving(home, "--max-streams", "2") as server:
        yield server


def anonymous(served: Served, **kwargs: object) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=30.0, **kwargs)  # type: ignore[arg-type]


def test_on_loopback_a_request_must_name_a_loopback_host(local: Served) -> None:
    with anonymous(local) as client:
        assert client.get("/api/info").status_code == 200
        assert client.get("/api/info", headers={"Host": f"localhost:{local.port}"}).status_code == 200
        assert client.get("/api/info", headers={"Host": f"[::1]:{local.port}"}).status_code == 200
        for host in ("evil.example", f"evil.example:{local.port}", f"127.0.0.1.evil.example:{local.port}",
                     "localhost.evil.example", "[::1]evil.example", f"[::1]:{local.port}@evil.example",
                     "localhost:abc", ""):  # fmt: skip
            refused = client.get("/api/info", headers={"Host": host})  # DNS rebinding
            assert refused.status_code == 421, host
            assert refused.json()["detail"]["code"] == "wrong_host"
        assert client.get("/", headers={"Host": "evil.example"}).status_code == 421


def test_state_changes_from_another_site_are_refused(local: Served) -> None:
    before = len(local.get("/api/threads", params={"limit": 200})["items"])
    own = f"http://127.0.0.1:{local.port}"
    with anonymous(local) as client:
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Origin": f"https://127.0.0.1:{local.port}"},  # another scheme is another origin
            {"Origin": "http://127.0.0.1:1"},  # another port too
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site", "Origin": own},
        ):
            refused = client.post("/api/threads", json={}, headers=headers)
            assert refused.status_code == 403, headers
            assert refused.json()["detail"]["code"] == "cross_site"
            assert client.delete("/api/threads/x", headers=headers).status_code == 403
        assert len(local.get("/api/threads", params={"limit": 200})["items"]) == before  # nothing made
        made = client.post("/api/threads", json={}, headers={"Origin": own, "Sec-Fetch-Site": "same-origin"})
        assert made.status_code == 201
        # A cross-site GET may read nothing either: no CORS header is ever sent, preflights fail.
        read = client.get("/api/threads", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in read.headers
        preflight = client.options(
            "/api/threads",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert preflight.status_code >= 400 and "access-control-allow-origin" not in preflight.headers


def test_every_response_carries_the_security_headers(local: Served) -> None:
    with anonymous(local) as client:
        for path in ("/", "/api/info", "/static/app.css", "/api/nope"):
            response = client.get(path)
            assert "default-src 'self'" in response.headers["content-security-policy"], path
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["referrer-policy"] == "no-referrer"


def test_request_bodies_are_bounded_with_or_without_a_length(local: Served) -> None:
    big = b'{"title": "' + b"x" * (300 * 1024) + b'"}'
    with anonymous(local) as client:
        told = client.post("/api/threads", content=big, headers={"content-type": "application/json"})
        assert told.status_code == 413 and told.json()["detail"]["code"] == "too_large"

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(big), 16 * 1024):
                yield big[start : start + 16 * 1024]

        streamed = client.post("/api/threads", content=chunks(), headers={"content-type": "application/json"})
        assert streamed.status_code == 413, streamed.text
        assert client.get("/api/info").status_code == 200  # the server is fine
    # A small Content-Length in front of a big chunked body: refused, whichever the server would use.
    import socket

    with socket.create_connection(("127.0.0.1", local.port), timeout=30) as sock:
        sock.sendall(
            b"POST /api/threads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in [b" " * 65536] * 8)
            + b"2\r\n{}\r\n0\r\n\r\n"
        )
        status = sock.recv(4096).split(b"\r\n", 1)[0]
    assert status.split()[1] in (b"400", b"413"), status


def test_the_number_of_pages_following_events_is_bounded(local: Served) -> None:
    with ExitStack() as stack, anonymous(local) as client:
        for _ in range(2):
            opened = stack.enter_context(client.stream("GET", "/api/events"))
            assert opened.status_code == 200
        refused = client.get("/api/events")
        assert refused.status_code == 503 and refused.json()["detail"]["code"] == "busy"
    # Once a page leaves, another may follow.
    with anonymous(local) as client:

        def admitted() -> bool:
            with client.stream("GET", "/api/events") as response:
                return response.status_code == 200

        wait_for(admitted, 15, "a freed event stream")


def test_off_loopback_a_token_is_needed_and_the_page_keeps_it_in_an_http_only_cookie(home: Path) -> None:
    secret = "sk-test-never-shown-0123456789"
    with serving(home, "--host", "0.0.0.0", TETHER_API_KEY_OPENAI=secret) as served:
        token = served.token
        assert token and len(token) >= 32
        path = token_path(home)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
        with anonymous(served) as client:
            for path_ in ("/api/info", "/api/threads", "/api/events", "/api/openapi.json"):
                refused = client.get(path_)
                assert refused.status_code == 401, path_
                assert refused.json()["detail"]["code"] == "unauthorized"
            assert client.get("/api/info", headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert client.get("/api/info", headers={"Authorization": f"Basic {token}"}).status_code == 401
            assert client.get("/", params={"token": "wrong"}).status_code == 401
            assert client.get("/").status_code == 200  # the page itself holds nothing private
            login = client.get("/", params={"token": token}, follow_redirects=False)
            assert login.status_code == 303 and login.headers["location"] == "/"
            cookie = login.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
            # The cookie now stands for the token; the URL the page shows no longer holds it.
            info = client.get("/api/info")
            assert info.status_code == 200
            # Another local app's odd cookie next to ours does not hide it.
            for others in ('x={"a":1}', "x=a b", "tether_token=wrong"):
                mixed = httpx.get(f"http://127.0.0.1:{served.port}/api/info",
                                  headers={"Cookie": f"{others}; tether_token={token}"})  # fmt: skip
                assert mixed.status_code == 200, others
            page = client.get("/")
            for text in (info.text, page.text, client.get("/api/openapi.json").text):
                assert token not in text and secret not in text
        thread = served.post("/api/threads", {"title": "t"}, expect=201)["thread_id"]
        served.post(f"/api/threads/{thread}/messages", {"text": "查看游戏状态"}, expect=202)
        events = sse_events(served, after=0, until=lambda es: any(e["kind"] == "turn_finished" for e in es))
        assert all(token not in str(e) and secret not in str(e) for e in events)
    with serving(home, "--host", "0.0.0.0") as again:
        assert again.token == token  # kept, not regenerated
