"""``tether serve`` as a real process on 127.0.0.1 (any free port), for the web tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.helpers import ROOT

URL_RE = re.compile(r"tether serve: (http://\S+)")


class Served:
    """A running ``tether serve``: the URL it printed (``login``: it holds the token, and opening it
    logs a browser in), its base URL without the token, its token and an httpx client that sends it."""

    def __init__(self, proc: subprocess.Popen[str], url: str, home: Path) -> None:
        self.proc = proc
        self.home = home
        self.login = url
        base, _, token = url.partition("?token=")
        self.base = base.rstrip("/")
        self.token = token or None
        self.port = int(self.base.rsplit(":", 1)[1])
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", headers=headers, timeout=30.0)
        self.output: list[str] = []
        self.reader: threading.Thread | None = None

    def get(self, path: str, **kwargs: Any) -> Any:
        response = self.http.get(path, **kwargs)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return response.json()

    def post(self, path: str, json: Any = None, expect: int = 200, **kwargs: Any) -> Any:
        response = self.http.post(path, json=json, **kwargs)
        assert response.status_code == expect, (path, response.status_code, response.text)
        return response.json()

    def stop(self) -> int:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            if self.reader is not None:
                self.reader.join(timeout=5)
            self.proc.stdout.close()
        return self.proc.returncode


START_TIMEOUT_S = 60.0


def start(home: Path, *args: str, **env: str) -> Served:
    """Start ``tether serve --port 0 ARGS`` on ``home`` and wait until it prints its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        start_new_session=True,
        env={
            **os.environ,
            "TETHER_HOME": str(home),
            "TETHER_CLI_SERVER": "0",
            "TETHER_STOP_GRACE_COOPERATIVE_S": "0.5",
            "TETHER_STOP_GRACE_INTERRUPT_S": "0.5",
            **env,
        },
    )
    assert proc.stdout is not None
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            match = URL_RE.search(line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not ready.wait(START_TIMEOUT_S) or not found:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"tether serve did not start: {''.join(lines)[-3000:]}")
    served = Served(proc, found[0], home)
    served.output, served.reader = lines, reader
    return served


@contextlib.contextmanager
def serving(home: Path, *args: str, **env: str) -> Iterator[Served]:
    served = start(home, *args, **env)
    try:
        yield served
    finally:
        code = served.stop()
        assert code == 0, "".join(served.output)[-3000:]


def sse_events(
    served: Served,
    *,
    after: int | None = None,
    last_event_id: int | None = None,
    until: Any,
    timeout: float = 30,
) -> list[dict[str, Any]]:
    """Read ``/api/events`` until ``until(events)`` holds; the events (parsed) read so far."""
    import json

    params = {} if after is None else {"after": after}
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    with served.http.stream(
        "GET", "/api/events", params=params, headers=headers, timeout=timeout
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        current: dict[str, str] = {}
        for line in response.iter_lines():
            if line.startswith("id: "):
                current["id"] = line[4:]
            elif line.startswith("data: "):
                current["data"] = line[6:]
            elif line == "" and "data" in current and "id" not in current:
                current = {}  # the heartbeat (event: ping): no id, not an event of the log
            elif line == "" and "data" in current:
                event = json.loads(current["data"])
                assert event["id"] == int(current["id"])
                events.append(event)
                current = {}
                if until(events):
                    return events
            if time.monotonic() > deadline:
                break
    pytest.fail(f"the event stream ended or timed out; saw {[e['kind'] for e in events]}")


class EventReader:
    """A page that follows ``/api/events`` and reads everything it is sent, in a thread."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.status: int | None = None
        self.received = 0
        self.answered = threading.Event()
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            with httpx.Client(headers=self.served.http.headers, timeout=None) as client:
                with client.stream("GET", f"{self.served.base}/api/events") as response:
                    self.status = response.status_code
                    self.answered.set()
                    if response.status_code != 200:
                        return
                    for chunk in response.iter_raw():
                        self.received += len(chunk)
                        if self.stopping.is_set():
                            return
        except httpx.HTTPError as exc:
            if not self.stopping.is_set():  # the server ends it as it stops; before that it is a failure
                self.failure = exc
        finally:
            self.answered.set()

    def admitted(self) -> bool:
        assert self.answered.wait(30), "no answer to the event stream's request"
        return self.status == 200

    def close(self) -> None:
        """Leave at the next thing the server sends (a heartbeat at the latest)."""
        self.stopping.set()
