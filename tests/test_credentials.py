import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAI, completion, error
from tests.support.helpers import ROOT
from tether import credentials
from tether.agent.session import ConversationSession
from tether.config import ModelSettings
from tether.errors import ModelError
from tether.events import Event
from tether.execution.executor import Executor
from tether.models.factory import model_from_settings

SECRET = "sk-SECRET-4f9c2a7e1b8d6c3a5e0f"


def test_keyring_first_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert credentials.key_info("openai").source == "none"
    monkeypatch.setenv("TETHER_API_KEY", "from-env")
    assert credentials.get_key("openai") == "from-env"
    monkeypatch.setenv("TETHER_API_KEY_OPENAI", "provider-env")
    assert credentials.key_info("openai").source == "TETHER_API_KEY_OPENAI"
    credentials.set_key("openai", SECRET)
    assert credentials.get_key("openai") == SECRET
    info = credentials.key_info("openai")
    assert info.source == "keyring" and info.length == len(SECRET) and SECRET not in repr(info)
    assert credentials.delete_key("openai") and not credentials.delete_key("openai")


def test_a_secret_a_worker_reads_is_the_keyrings_else_its_own_variable_never_the_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_API_KEY", "the-models-key")
    assert credentials.secret_key("mcp.vault.token") is None  # the model's key is no server's secret
    monkeypatch.setenv("TETHER_API_KEY_MCP_VAULT_TOKEN", "a-variables-key")
    assert credentials.secret_key("mcp.vault.token") == "a-variables-key"
    credentials.set_key("mcp.vault.token", SECRET)
    assert credentials.secret_key("mcp.vault.token") == SECRET
    assert credentials.scrub(f"said {SECRET}") == "said ***"


def test_a_worker_is_handed_exactly_the_variables_its_task_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_API_KEY", "the-models-key")
    monkeypatch.setenv("TETHER_API_KEY_OPENAI", "the-providers-key")
    monkeypatch.setenv("TETHER_API_KEY_MCP_GIT_TOKEN", "git-token-1")
    monkeypatch.setenv("TETHER_API_KEY_MCP_GIT_HUB_TOKEN", "git-hub-token-2")
    assert credentials.handed_for(["mcp.git.token"]) == {"TETHER_API_KEY_MCP_GIT_TOKEN": "git-token-1"}
    assert credentials.handed_for(["mcp.git.missing", "mcp.git_hub.token"]) == {
        "TETHER_API_KEY_MCP_GIT_HUB_TOKEN": "git-hub-token-2"
    }
    assert credentials.handed_for(["mcp.*"]) == {
        "TETHER_API_KEY_MCP_GIT_TOKEN": "git-token-1",
        "TETHER_API_KEY_MCP_GIT_HUB_TOKEN": "git-hub-token-2",
    }
    assert credentials.handed_for([]) == {}


def test_a_worker_keeps_only_key_variables_it_was_handed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(credentials, "_HANDED", {})
    credentials.accept_handed(
        {"TETHER_API_KEY_MCP_X_TOKEN": "handed-secret-9", "PATH": "/evil", "TETHER_API_KEY": "model", "N": 3}
    )
    assert credentials._HANDED == {"TETHER_API_KEY_MCP_X_TOKEN": "handed-secret-9"}
    assert credentials.secret_key("mcp.x.token") == "handed-secret-9"
    assert credentials.scrub("a handed-secret-9 b") == "a *** b"


def test_bad_provider_names_are_refused() -> None:
    from tether.errors import CredentialError

    with pytest.raises(CredentialError, match="lowercase"):
        credentials.get_key("Open AI!")


def test_auth_commands_never_print_the_key(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "TETHER_HOME": str(tmp_path / "home")}
    run = lambda *args, stdin="": subprocess.run(  # noqa: E731
        [sys.executable, "-m", "tether.interfaces.cli", "auth", *args], input=stdin, capture_output=True,
        text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    stored = run("set", "deepseek", stdin=SECRET + "\n")
    assert stored.returncode == 0, stored.stderr
    shown = run("show", "deepseek")
    assert shown.returncode == 0 and "keyring" in shown.stdout and str(len(SECRET)) in shown.stdout
    assert run("delete", "deepseek").returncode == 0
    assert run("show", "deepseek").returncode == 1
    for proc in (stored, shown):
        assert SECRET not in proc.stdout + proc.stderr


def test_the_key_never_reaches_logs_events_the_store_or_errors(
    home: Path,
    fake_openai: FakeOpenAI,
    make_executor,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_MODEL_STREAM", "0")  # the fake answers with plain JSON
    credentials.set_key("openai", SECRET)
    settings = ModelSettings(model="gpt-4o-mini", base_url=fake_openai.url, retry_max_attempts=2,
                             retry_base_delay_s=0.001, retry_max_delay_s=0.002)  # fmt: skip
    executor: Executor = make_executor()
    model = model_from_settings(home, settings)
    assert SECRET not in repr(model)
    session = ConversationSession(executor, model)
    events: list[Event] = []
    session.events.subscribe(events.append)
    caplog.set_level(logging.DEBUG)

    fake_openai.reply(completion(tool_calls=[("c1", "demo__status", "{}")]))
    fake_openai.reply(completion(content="all good"))
    first = session.send_sync("t", "status?")
    assert first.final == "all good", (first, len(fake_openai.requests))
    fake_openai.fail(error(401, "invalid_api_key", f"Incorrect API key provided: {SECRET}"))
    failed = session.send_sync("t", "again")
    assert failed.status == "failed", failed
    for _ in range(2):
        fake_openai.fail(error(500, None, "boom"))
    with pytest.raises(ModelError) as info:
        asyncio.run(model.complete([{"role": "user", "content": "x"}], []))

    assert fake_openai.headers[0]["authorization"] == f"Bearer {SECRET}"  # the key was really used
    haystack = [caplog.text, str(info.value), repr(info.value.data), failed.final]
    haystack += [repr(e) for e in events]
    for path in home.rglob("*"):
        if path.is_file():
            haystack.append(path.read_bytes().decode("utf-8", errors="replace"))
    leaks = [text[:80] for text in haystack if SECRET in text]
    assert leaks == []


@pytest.mark.parametrize("status", [400, 401, 429, 500])
def test_a_key_echoed_in_any_field_of_a_provider_error_is_redacted_everywhere(
    home: Path,
    fake_openai: FakeOpenAI,
    make_executor,
    monkeypatch: pytest.MonkeyPatch,
    status: int,  # type: ignore[no-untyped-def]
) -> None:
    """Audit 3: a key echoed in the provider's error code reached stdout, `tether trace` and the store."""
    monkeypatch.setenv("TETHER_MODEL_STREAM", "0")
    credentials.set_key("openai", SECRET)
    settings = ModelSettings(model="gpt-4o-mini", base_url=fake_openai.url, retry_max_attempts=1)
    echo = {
        "status": status,
        "body": {
            "error": {
                "message": f"key {SECRET} rejected",
                "type": SECRET,
                "code": SECRET,
                "param": {"nested": [SECRET, {"deeper": f"x{SECRET}x"}]},
                "innererror": {"code": SECRET},
            }
        },
        "headers": {},
    }
    fake_openai.fail(echo)
    session = ConversationSession(make_executor(), model_from_settings(home, settings))
    failed = session.send_sync("t", "status?")
    assert failed.status == "failed"
    fake_openai.fail(echo)
    with pytest.raises(ModelError) as info:
        asyncio.run(model_from_settings(home, settings).complete([{"role": "user", "content": "x"}], []))
    haystack = [str(info.value), repr(info.value.data), failed.final, repr(failed.steps)]
    haystack += [p.read_bytes().decode("utf-8", "replace") for p in home.rglob("*") if p.is_file()]
    assert [text[:80] for text in haystack if SECRET in text] == []
    assert "***" in str(info.value)


def test_an_error_in_the_middle_of_a_stream_never_shows_the_key(
    home: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: an `error` event inside a stream left the SDK as a bare APIError with the key in it,
    which the CLI printed and wrote to its crash log."""
    monkeypatch.setenv("TETHER_MODEL_STREAM", "1")
    (home / "settings.toml").write_text(
        f'[model]\nmodel = "gpt-4o-mini"\nbase_url = "{fake_openai.url}"\nretry_max_attempts = 2\n'
        "retry_base_delay_s = 0.001\nretry_max_delay_s = 0.002\n"
    )
    echo = {"error": {"message": f"upstream failed for key {SECRET}", "code": SECRET}}
    for _ in range(2):  # a cut answer is retried: both attempts fail the same way
        fake_openai.stream([echo])
    proc = subprocess.run(
        [sys.executable, "-m", "tether.interfaces.cli", "run", "hello", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**__import__("os").environ, "TETHER_HOME": str(home), "TETHER_API_KEY": SECRET},
    )
    document = json.loads(proc.stdout)
    assert document["status"] == "failed" and "mid-answer" in document["final"], document
    written = [p.read_bytes().decode(errors="replace") for p in home.rglob("*") if p.is_file()]
    assert SECRET not in proc.stdout + proc.stderr and not [w for w in written if SECRET in w]
