"""A home whose settings name the test suite's notes server (``notes_server.py``, a real process)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import FAST
from tether.config import Settings
from tether.execution.executor import Executor
from tether.tasks.result import TaskResult, TaskStatus
from tether.toolkits.mcp import cache
from tether.toolkits.mcp.servers import load_servers
from tether.toolkits.mcp.specs import registry

SERVER = Path(__file__).with_name("notes_server.py")
EVERY_TOOL = [
    "read_note", "delete_note", "countWords", "whoami", "wait", "summarize", "crash", "fail", "read*file"
]  # fmt: skip
# The test keyring (a file) reaches a worker that may read the keyring only through this variable.
KEYRING_SETTINGS = Settings(**{**FAST.model_dump(), "worker_env": ("TETHER_TEST_KEYRING",)})


def server_entry(
    name: str, log: Path, *, tools: list[str] | None = None, env: dict[str, str] | None = None, **more: Any
) -> str:
    """One [[mcp.servers]] entry starting the notes server over stdio, in TOML."""
    plain = ", ".join(f"{k} = {json.dumps(v)}" for k, v in {"NOTES_LOG": str(log), **(env or {})}.items())
    lines = [
        "[[mcp.servers]]",
        f"name = {json.dumps(name)}",
        f"command = {json.dumps(sys.executable)}",
        f"args = [{json.dumps(str(SERVER))}]",
        f"env = {{ {plain} }}",
        f"tools = {json.dumps(EVERY_TOOL if tools is None else tools)}",
    ]
    lines += [f"{key} = {json.dumps(value)}" for key, value in more.items() if not isinstance(value, dict)]
    for key, value in more.items():
        if isinstance(value, dict):
            inline = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items())
            lines.append(f"{key} = {{ {inline} }}")
    return "\n".join(lines) + "\n"


def ran(log: Path) -> list[dict[str, Any]]:
    """The calls the notes server ran, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


def live_servers(log: Path) -> list[int]:
    """The pids of notes servers still running for this test (their NOTES_LOG is ``log``)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if process.environ().get("NOTES_LOG") == str(log) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


def keep_listing(home: Path, server: str, *tools: dict[str, Any]) -> None:
    """A kept tool list of ``server`` that is current (as a refresh would leave it), without starting
    the server: ``tools`` as ``cache.tool_entry`` makes them, by default one ``whoami``."""
    kept = load_servers(home)[server]
    entries = tools or (cache.tool_entry("whoami", None, "", {"type": "object"}, {}),)
    listing = cache.Listing(
        server=server, fingerprint=kept.fingerprint(), listed_at=cache.now(), tools=entries
    )
    cache.write(home, listing)


def refresh(executor: Executor, server: str = "notes") -> TaskResult:
    result = executor.execute_sync("mcp.refresh", {"server": server}, caller="cli")
    assert result.status is TaskStatus.COMPLETED, result
    return result


@pytest.fixture
def notes_log(tmp_path: Path) -> Path:
    return tmp_path / "notes-calls.jsonl"


@pytest.fixture
def notes(home: Path, notes_log: Path, make_executor: Callable[..., Executor]) -> Executor:
    """An executor on a home that imports the notes server's tools, listed once."""
    entry = server_entry("notes", notes_log, timeout_s=30, background=["wait"])
    (home / "settings.toml").write_text(entry, encoding="utf-8")
    executor = make_executor(registry)
    refresh(executor)
    return executor
