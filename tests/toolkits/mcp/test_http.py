"""An MCP server reached by URL over streamable HTTP on 127.0.0.1 (a real process), its bearer token
a secret header read from the keyring."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.helpers import wait_for
from tests.toolkits.mcp.conftest import KEYRING_SETTINGS, SERVER, ran
from tether import credentials
from tether.execution.executor import Executor
from tether.tasks.result import TaskStatus
from tether.toolkits.mcp.specs import registry

TOKEN = "http-token-0b7e5d"


@pytest.fixture
def http_server(notes_log: Path) -> Iterator[str]:
    env = {**os.environ, "NOTES_EXPECT_TOKEN": TOKEN, "NOTES_LOG": str(notes_log)}
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http"], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    port = process.stdout.readline().strip()  # the server prints its port once it listens
    assert port.isdigit(), port
    yield f"http://127.0.0.1:{port}/mcp"
    process.kill()
    process.wait(timeout=10)
    process.stdout.close()


def test_a_url_server_is_listed_and_called_with_its_secret_header(
    home: Path, http_server: str, notes_log: Path, make_executor: Callable[..., Executor]
) -> None:
    (home / "settings.toml").write_text(
        f'[[mcp.servers]]\nname = "remote"\nurl = "{http_server}"\nsecret_headers = ["Authorization"]\n'
        'tools = ["read_note"]\n',
        encoding="utf-8",
    )
    executor = make_executor(registry, settings=KEYRING_SETTINGS)
    missing = executor.execute_sync("mcp.refresh", {"server": "remote"}, caller="cli")
    assert missing.status is TaskStatus.FAILED
    assert "Authorization (`tether auth set mcp.remote.authorization`)" in missing.message

    credentials.set_key("mcp.remote.authorization", "Bearer wrong-token")
    refused = executor.execute_sync("mcp.refresh", {"server": "remote"}, caller="cli")
    assert refused.status is TaskStatus.FAILED and "the MCP server 'remote'" in refused.message
    assert "wrong-token" not in refused.message
    assert (
        "it answered HTTP 401 (is its secret header right? `tether auth set mcp.remote.authorization`)"
        in (refused.message)
    )

    credentials.set_key("mcp.remote.authorization", f"Bearer {TOKEN}")
    listed = executor.execute_sync("mcp.refresh", {"server": "remote"}, caller="cli")
    assert listed.status is TaskStatus.COMPLETED, listed
    assert listed.data["imported"] == ["mcp.remote.read_note"]
    result = executor.execute_sync("mcp.remote.read_note", {"name": "list", "mode": "full"}, caller="cli")
    assert result.status is TaskStatus.COMPLETED, result
    assert result.message == "note list (full): buy milk"
    wait_for(lambda: ran(notes_log), what="the server's record of the call")
    assert ran(notes_log)[-1]["arguments"] == {"name": "list", "mode": "full"}
