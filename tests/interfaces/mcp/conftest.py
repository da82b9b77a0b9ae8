"""Shared by the MCP tests: a running ``tether mcp serve --http`` on 127.0.0.1."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interfaces.mcp.peers import DEMO
from tests.support.helpers import ROOT
from tether.interfaces.web.security import token_path

URL_RE = re.compile(r"tether mcp serve: (http://\S+)")


def _url(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """The URL the server prints once it serves (the test fails at the deadline)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            found = URL_RE.search(line)
            if found:
                return found.group(1)
    proc.kill()
    pytest.fail(f"tether mcp serve --http did not start: {proc.stderr.read() if proc.stderr else ''}")


@pytest.fixture
def served(home: Path) -> Iterator[tuple[str, str]]:
    """(the /mcp URL, the home's token) of a running ``tether mcp serve --http --port 0``."""
    env = {**os.environ, "TETHER_HOME": str(home), "TETHER_REGISTRY": DEMO}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.interfaces.cli", "mcp", "serve", "--http", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        url = _url(proc)
        yield url, token_path(home).read_text().strip()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
