"""``tether serve``'s guard, tried from the outside: host, token, cookie, cross-site requests, CORS, body
and stream bounds, security headers; no secret in the page, the API or the event stream."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
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


def bearer(served: Served) -> dict[str, str]:
    assert served.token
    return {"Authorization": f"Bearer {served.token}"}


OTHER_USER = "tether-other"
# What another local user's process tries: read the token, then ask the server without it (and with a
# guess). Plain urllib: the other user cannot read this repository's virtualenv.
OTHER_USER_TRIES = r"""
import json, sys, urllib.error, urllib.request
port, token_file, thread, pending = sys.argv[1:5]
tried = {}
try:
    open(token_file).read()
    tried["token_file"] = "read"
except OSError as exc:
    tried["token_file"] = type(exc).__name__
def ask(method, path, headers=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, headers=headers or {},
                                     data=b"{}" if method == "POST" else None)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
tried["info"] = ask("GET", "/api/info")
tried["confirmations"] = ask("GET", "/api/confirmations")
tried["approve"] = ask("POST", f"/api/threads/{thread}/confirmations/{pending}/approve")
tried["guessed"] = ask("POST", f"/api/threads/{thread}/confirmations/{pending}/approve",
                       {"Authorization": "Bearer " + "A" * 43, "Cookie": "tether_token=" + "A" * 43})
print(json.dumps(tried))
"""


def other_user() -> str:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create a second local user")
    if subprocess.run(["id", "-u", OTHER_USER], capture_output=True).returncode != 0:
        add = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER]
        subprocess.run(add, check=True, capture_output=True)
    return OTHER_USER


def test_on_loopback_another_local_user_cannot_approve_a_destructive_call(local: Served) -> None:
    """Any local process of any local user reaches 127.0.0.1: without the token (which only the home's
    owner can read) it gets nothing, and above all cannot approve a destructive call."""
    user = other_user()
    thread = local.post("/api/threads", {"title": "guarded"}, expect=201)["thread_id"]
    for text in ("启动游戏", "分解四星遗器"):
        turns = local.get(f"/api/threads/{thread}")["turns"]
        local.post(f"/api/threads/{thread}/messages", {"text": text}, expect=202)
        wait_for(lambda turns=turns: (t := local.get(f"/api/threads/{thread}"))["turns"] > turns
                 and not t["running"], 60, f"the turn {text!r}")  # fmt: skip
    pending = local.get(f"/api/threads/{thread}")["pending"]
    assert pending is not None and pending["tool"] == "demo.salvage_relics"
    args = [str(local.port), str(token_path(local.home)), thread, pending["pending_id"]]
    command = ["/usr/bin/python3", "-I", "-c", OTHER_USER_TRIES, *args]
    ran = subprocess.run(command, user=user, group=user, extra_groups=[], env={"PATH": "/usr/bin:/bin"},
                         cwd="/", capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    tried = json.loads(ran.stdout)
    assert tried == {"token_file": "PermissionError", "info": 401, "confirmations": 401, "approve": 401,
                     "guessed": 401}, tried  # fmt: skip
    after = local.get(f"/api/threads/{thread}")
    assert after["pending"] == pending and after["turns"] == 2  # nothing was approved, no turn ran
    ran = [j for j in local.get("/api/jobs")["items"] if j["task_id"] == "demo.salvage_relics"]
    assert all(j["status"] == "rejected" and j["data"].get("needs_confirmation") for j in ran), ran
    # The same requests with the token (as the home's owner has it) are answered.
    assert local.http.get("/api/confirmations").status_code == 200
    local.post(f"/api/threads/{thread}/confirmations/{pending['pending_id']}/deny", expect=202)


def test_on_loopback_a_request_must_name_a_loopback_host(local: Served) -> None:
    with anonymous(local, headers=bearer(local)) as client:
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


def test_on_loopback_too_the_api_needs_the_token_and_the_printed_url_logs_in(local: Served) -> None:
    assert local.token and len(local.token) >= 32  # the URL `tether serve` printed holds it
    assert any("open that URL once" in line for line in local.output)
    with anonymous(local) as client:
        for path in ("/api/info", "/api/threads", "/api/events", "/api/openapi.json", "/api/confirmations"):
            refused = client.get(path)
            assert refused.status_code == 401 and refused.json()["detail"]["code"] == "unauthorized", path
        assert client.post("/api/threads", json={}).status_code == 401
        assert client.get("/").status_code == 200 and client.get("/static/app.js").status_code == 200
        login = client.get("/", params={"token": local.token}, follow_redirects=False)
        assert login.status_code == 303 and "set-cookie" in login.headers
        assert client.get("/api/info").status_code == 200  # the cookie stands for the token now
    document = local.get("/api/openapi.json")  # the document says how to authenticate
    schemes = document["components"]["securitySchemes"]
    assert {s["type"] for s in schemes.values()} == {"http", "apiKey"}
    assert all(op.get("security") or document.get("security") for ops in document["paths"].values()
               for op in ops.values())  # fmt: skip


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
        same = {"Origin": own, "Sec-Fetch-Site": "same-origin"}
        assert client.post("/api/threads", json={}, headers=same).status_code == 401  # and the token
        made = client.post("/api/threads", json={}, headers={**same, **bearer(local)})
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
    with anonymous(local, headers=bearer(local)) as client:
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
    with ExitStack() as stack, anonymous(local, headers=bearer(local)) as client:
        for _ in range(2):
            opened = stack.enter_context(client.stream("GET", "/api/events"))
            assert opened.status_code == 200
        refused = client.get("/api/events")
        assert refused.status_code == 503 and refused.json()["detail"]["code"] == "busy"
    # Once a page leaves, another may follow.
    with anonymous(local, headers=bearer(local)) as client:

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
            assert "max-age=" in cookie  # the page keeps working after the browser restarts
            name = login.headers["set-cookie"].split("=", 1)[0]
            assert name.startswith("tether_token_") and token[:8] not in name
            # The cookie now stands for the token; the URL the page shows no longer holds it.
            info = client.get("/api/info")
            assert info.status_code == 200
            # Another local app's odd cookie next to ours does not hide it.
            for others in ('x={"a":1}', "x=a b", f"{name}=wrong"):
                mixed = httpx.get(f"http://127.0.0.1:{served.port}/api/info",
                                  headers={"Cookie": f"{others}; {name}={token}"})  # fmt: skip
                assert mixed.status_code == 200, others
            # Another server's cookie (cookies ignore the port) is not this one's.
            elsewhere = {"Cookie": f"tether_token_000000000000={token}"}
            assert httpx.get(f"http://127.0.0.1:{served.port}/api/info", headers=elsewhere).status_code == 401
            page = client.get("/")
            for text in (info.text, page.text, client.get("/api/openapi.json").text):
                assert token not in text and secret not in text
        thread = served.post("/api/threads", {"title": "t"}, expect=201)["thread_id"]
        served.post(f"/api/threads/{thread}/messages", {"text": "查看游戏状态"}, expect=202)
        events = sse_events(served, after=0, until=lambda es: any(e["kind"] == "turn_finished" for e in es))
        assert all(token not in str(e) and secret not in str(e) for e in events)
    with serving(home, "--host", "0.0.0.0") as again:
        assert again.token == token  # kept, not regenerated


def test_open_hands_the_browser_an_owner_only_file_never_the_token_on_its_command_line(
    home: Path, tmp_path: Path
) -> None:
    seen = tmp_path / "browser-argv.json"
    browser = tmp_path / "browser"
    browser.write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(seen)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    browser.chmod(0o700)
    with serving(home, "--open", BROWSER=f"{browser} %s") as served:
        argv = wait_for(lambda: seen.exists() and json.loads(seen.read_text() or "null"), 30, "the browser")
        assert served.token and all(served.token not in arg for arg in argv), argv
        opened = Path(argv[0].removeprefix("file://"))
        assert opened.is_file() and stat.S_IMODE(opened.stat().st_mode) == 0o600
        assert served.login in opened.read_text(encoding="utf-8").replace("&amp;", "&")
        # What the file leads to logs a browser in.
        with anonymous(served) as client:
            assert client.get(served.login, follow_redirects=False).status_code == 303
