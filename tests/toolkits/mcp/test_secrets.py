"""An MCP server's secrets come from the keyring into that server's worker and process only: never
into settings, the home's records and logs, or another server's process."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pytest import MonkeyPatch

from tests.support.helpers import tether_cli
from tests.toolkits.mcp.conftest import KEYRING_SETTINGS, refresh, server_entry
from tether import credentials
from tether.execution.executor import Executor
from tether.execution.protocol import ExecutionPaths
from tether.interfaces import doctor
from tether.tasks.result import TaskStatus
from tether.toolkits.mcp import cache
from tether.toolkits.mcp.servers import load_servers
from tether.toolkits.mcp.specs import KEYRING_ENV, registry

TOKEN = "notes-token-4f1c9a27be"
# What the SDK hands a stdio server from its starter's environment, and the locale Python may add.
BASICS = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE"}


def _request_env(home: Path, execution_id: str) -> dict[str, str]:
    paths = ExecutionPaths(home / "executions" / execution_id)
    return json.loads(paths.request.read_text(encoding="utf-8"))["env"]


def test_a_secret_reaches_its_server_and_nowhere_else(
    home: Path, notes_log: Path, make_executor: Callable[..., Executor]
) -> None:
    (home / "settings.toml").write_text(
        server_entry("vault", notes_log, tools=["whoami"], secret_env=["NOTES_TOKEN"])
        + server_entry("notes", notes_log, tools=["whoami"]),
        encoding="utf-8",
    )
    executor = make_executor(registry, settings=KEYRING_SETTINGS)
    missing = executor.execute_sync("mcp.refresh", {"server": "vault"}, caller="cli")
    assert missing.status is TaskStatus.FAILED  # listing needs the secret too; it is not stored yet
    assert "not stored: NOTES_TOKEN (`tether auth set mcp.vault.notes_token`)" in missing.message
    assert not notes_log.exists()  # so nothing was started

    credentials.set_key("mcp.vault.notes_token", TOKEN)
    refresh(executor, "vault")
    seen = executor.execute_sync("mcp.vault.whoami", {}, caller="cli")
    assert seen.status is TaskStatus.COMPLETED, seen
    mine = seen.data["structured"]
    assert mine["token_sha256"] == hashlib.sha256(TOKEN.encode()).hexdigest()
    assert set(mine["env"]) <= BASICS | {"NOTES_LOG", "NOTES_TOKEN"}, mine["env"]

    refresh(executor, "notes")
    other = executor.execute_sync("mcp.notes.whoami", {}, caller="cli")
    assert other.status is TaskStatus.COMPLETED and other.data["structured"]["token_sha256"] is None
    # only the worker of a server with secrets may reach the keyring
    assert "PYTHON_KEYRING_BACKEND" in _request_env(home, seen.execution_id)
    assert not set(KEYRING_ENV) & set(_request_env(home, other.execution_id))

    for path in [p for p in home.rglob("*") if p.is_file()]:
        assert TOKEN.encode() not in path.read_bytes(), f"the secret was written to {path}"
    for record in executor.store.list():
        assert TOKEN not in json.dumps([record.message, record.data], default=str)


def _keep_a_list(home: Path, server: str) -> None:
    """A kept tool list that is current, so that only the secrets can be missing."""
    kept = load_servers(home)[server]
    entry = cache.tool_entry("whoami", None, "", {"type": "object"}, {})
    listing = cache.Listing(
        server=server, fingerprint=kept.fingerprint(), listed_at=cache.now(), tools=(entry,)
    )
    cache.write(home, listing)


@pytest.mark.parametrize("where", ["keyring", "its own variable", "the model's variable"])
def test_the_doctor_the_tools_list_and_the_worker_agree_on_whether_a_secret_is_stored(
    where: str, home: Path, notes_log: Path, make_executor: Callable[..., Executor], monkeypatch: MonkeyPatch
) -> None:
    """Review: the doctor and `tether mcp tools` counted a secret found in any variable as stored,
    while the worker that needs it (whose environment is allowlisted) could not find it. Now the
    secret's own variable is handed to that worker, and the model's key is no server's secret."""
    (home / "settings.toml").write_text(
        server_entry("vault", notes_log, tools=["whoami"], secret_env=["NOTES_TOKEN"])
        + '[execution]\nworker_env = ["TETHER_TEST_KEYRING"]\n',
        encoding="utf-8",
    )
    _keep_a_list(home, "vault")
    if where == "keyring":
        credentials.set_key("mcp.vault.notes_token", TOKEN)
    elif where == "its own variable":
        monkeypatch.setenv(credentials.env_names("mcp.vault.notes_token")[0], TOKEN)
    else:
        monkeypatch.setenv("TETHER_API_KEY", TOKEN)

    check = doctor.check_mcp(home)
    assert check is not None
    doctor_says = "store its secret NOTES_TOKEN" not in check.fix
    code, out, err = tether_cli("mcp", "tools", "vault", "--json", home=home)
    assert code == 0, (out, err)
    [vault] = json.loads(out)["servers"]
    listing_says = vault["secrets"]["NOTES_TOKEN"]["stored"]
    executor = make_executor(registry, settings=KEYRING_SETTINGS)
    called = executor.execute_sync("mcp.vault.whoami", {}, caller="cli")
    worker_found = called.status is TaskStatus.COMPLETED
    assert worker_found or "needs secrets that are not stored" in called.message, called
    assert doctor_says == listing_says == worker_found, (doctor_says, listing_says, called.message)
    assert worker_found == (where != "the model's variable")


NO_KEYRING = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}


@pytest.mark.parametrize("spawner", ["fork server", "fresh interpreter", "CLI server"])
def test_a_machine_without_a_keyring_hands_a_secrets_variable_to_its_servers_worker_alone(
    spawner: str,
    home: Path,
    notes_log: Path,
    make_executor: Callable[..., Executor],
    monkeypatch: MonkeyPatch,
) -> None:
    """A headless host (a `tether worker` service) has no OS keyring: `tether auth set` tells a person to
    set TETHER_API_KEY_MCP_… instead, which no worker ever received. Now the process that starts a
    call's worker hands it that one variable, through the spawner's own channel: whichever spawner."""
    (home / "settings.toml").write_text(
        server_entry("vault", notes_log, tools=["whoami"], secret_env=["NOTES_TOKEN"])
        + server_entry("notes", notes_log, tools=["whoami"]),
        encoding="utf-8",
    )
    variable = credentials.env_names("mcp.vault.notes_token")[0]
    for name, value in {**NO_KEYRING, variable: TOKEN, "TETHER_API_KEY": "the-models-key-7"}.items():
        monkeypatch.setenv(name, value)
    if spawner == "CLI server":
        for server in ("vault", "notes"):
            code, out, err = tether_cli("mcp", "tools", server, "--refresh", home=home)
            assert code == 0, (out, err)
        code, out, err = tether_cli("task", "run", "mcp.vault.whoami", "--json", home=home)
        assert code == 0, (out, err)
        mine = json.loads(out)["data"]["structured"]
        code, out, err = tether_cli("task", "run", "mcp.notes.whoami", "--json", home=home)
        assert code == 0, (out, err)
        theirs = json.loads(out)["data"]["structured"]
    else:
        settings = KEYRING_SETTINGS.model_copy(update={"forkserver": spawner == "fork server"})
        executor = make_executor(registry, settings=settings)
        refresh(executor, "vault")
        refresh(executor, "notes")
        mine = executor.execute_sync("mcp.vault.whoami", {}, caller="cli").data["structured"]
        theirs = executor.execute_sync("mcp.notes.whoami", {}, caller="cli").data["structured"]
    assert mine["token_sha256"] == hashlib.sha256(TOKEN.encode()).hexdigest()
    assert set(mine["env"]) <= BASICS | {"NOTES_LOG", "NOTES_TOKEN"}, mine["env"]
    assert theirs["token_sha256"] is None  # another server's worker was handed nothing
    for path in [p for p in home.rglob("*") if p.is_file()]:
        assert TOKEN.encode() not in path.read_bytes(), f"the secret was written to {path}"
