"""Setup without surprises: model configuration errors say what to do, keys never go to a plaintext
backend, and `tether doctor` checks it all."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAI
from tether import credentials
from tether.config import ModelSettings
from tether.errors import ConfigError, CredentialError
from tether.models.factory import model_from_settings, resolve
from tether.models.offline import OfflineModel
from tether.models.presets import PRESETS, preset

TETHER = str(Path(sys.executable).parent / "tether")


def tether(home: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TETHER, "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},  # through the test process's CLI server, as a person's commands go
    )


def settings_file(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.toml").write_text(text, encoding="utf-8")
    return home


# -- model configuration ---------------------------------------------------------------------------


def test_no_model_section_is_the_offline_model(tmp_path: Path) -> None:
    assert isinstance(model_from_settings(tmp_path), OfflineModel)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[model]\nprovider = "deepseek"\n', "does not name a model|but not `model`"),
        ("[model]\n", "does not name a model"),
        ('[modle]\nmodel = "gpt-4o"\n', "did you mean 'model'"),
        ('[model]\nprovider = "acme"\nmodel = "acme-1"\n', "no known address.*deepseek"),
        ('[model]\nmodle = "gpt-4o"\n', "unknown setting.*did you mean 'model'"),
    ],
)
def test_a_broken_model_configuration_is_an_error_never_the_offline_model(
    tmp_path: Path, text: str, says: str
) -> None:
    home = settings_file(tmp_path / "home", text)
    with pytest.raises(ConfigError, match=says):
        model_from_settings(home)
    run = tether(home, "run", "start the game")
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert "error:" in run.stderr


def test_a_hosted_model_without_a_key_says_how_to_give_one(tmp_path: Path) -> None:
    home = settings_file(tmp_path / "home", '[model]\nprovider = "deepseek"\nmodel = "deepseek-chat"\n')
    with pytest.raises(CredentialError, match=r"tether auth set deepseek.*TETHER_API_KEY_DEEPSEEK"):
        model_from_settings(home)
    run = tether(home, "run", "hi")
    assert run.returncode == 2 and "tether auth set deepseek" in run.stderr


@pytest.mark.parametrize("name", ["openai", "deepseek", "qwen", "dashscope", "moonshot", "zhipu"])
def test_hosted_presets_need_a_key_and_have_an_address(name: str) -> None:
    found = preset(name)
    assert found is not None and found.base_url.startswith("https://") and found.needs_key


@pytest.mark.parametrize("name", ["ollama", "vllm", "lm-studio", "llama-cpp", "llama.cpp"])
def test_local_presets_need_no_key(tmp_path: Path, name: str) -> None:
    choice = resolve(tmp_path, ModelSettings(provider=name, model="qwen2.5"))
    assert choice.local and not choice.needs_key and choice.base_url.startswith("http://127.0.0.1")
    model = model_from_settings(tmp_path, ModelSettings(provider=name, model="qwen2.5"))
    assert getattr(model, "base_url", "") == choice.base_url
    assert len(PRESETS) >= 9


def test_an_explicit_base_url_wins_over_the_preset(tmp_path: Path) -> None:
    choice = resolve(
        tmp_path, ModelSettings(provider="openai", model="m", base_url="http://10.0.0.5:8000/v1")
    )
    assert choice.base_url == "http://10.0.0.5:8000/v1" and choice.local and not choice.needs_key


# -- keys ------------------------------------------------------------------------------------------


def test_no_plaintext_keyring_backend_is_installed() -> None:
    import importlib.metadata

    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.distribution("keyrings.alt")


def test_auth_set_refuses_a_machine_without_a_keyring(tmp_path: Path) -> None:
    run = tether(
        tmp_path, "auth", "set", "deepseek", stdin="sk-a-real-looking-key-123\n",
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
    )  # fmt: skip
    assert (
        run.returncode == 2 and "cannot store a key" in run.stderr and "TETHER_API_KEY_DEEPSEEK" in run.stderr
    )
    # Refused once, before asking: no prompt, no getpass warning, one line of what to do instead.
    assert run.stderr.count("no OS keyring") == 1 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "API key for" not in run.stderr and "Warning" not in run.stderr, run.stderr
    assert "sk-a-real-looking-key-123" not in run.stdout + run.stderr
    assert not any(p.is_file() and "sk-a-real" in p.read_text(errors="replace") for p in tmp_path.rglob("*"))


def test_auth_set_reads_a_piped_key_as_one_line_without_a_prompt(tmp_path: Path) -> None:
    run = tether(tmp_path, "auth", "set", "deepseek", stdin="sk-piped-key-123\n")
    assert run.returncode == 0 and "stored the key for deepseek" in run.stdout, run.stderr
    assert run.stderr == "", run.stderr  # no prompt into the pipe, no GetPassWarning
    shown = tether(tmp_path, "auth", "show", "deepseek", "--json")
    assert json.loads(shown.stdout) == {"provider": "deepseek", "source": "keyring", "length": 16}
    empty = tether(tmp_path, "auth", "set", "deepseek")
    assert empty.returncode == 2 and "no key on standard input" in empty.stderr, empty.stderr


def test_a_plaintext_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import keyring
    from keyring.backend import KeyringBackend

    class PlaintextKeyring(KeyringBackend):  # what keyrings.alt installs on a headless machine
        priority = 0.5  # type: ignore[assignment]

        def get_password(self, service: str, username: str) -> str | None:
            return None

        def set_password(self, service: str, username: str, password: str) -> None:
            raise AssertionError("a key was written to a plaintext file")

        def delete_password(self, service: str, username: str) -> None:
            pass

    PlaintextKeyring.__module__ = "keyrings.alt.file"
    monkeypatch.setattr(keyring, "get_keyring", lambda: PlaintextKeyring())
    assert "anyone can read" in (credentials.backend_problem() or "")
    with pytest.raises(CredentialError, match=r"cannot store a key.*TETHER_API_KEY_OPENAI"):
        credentials.set_key("openai", "sk-plain-text-would-be-bad")


# -- tether doctor -----------------------------------------------------------------------------------


def test_doctor_on_a_fresh_home_is_all_ok(tmp_path: Path) -> None:
    run = tether(tmp_path / "home", "doctor", "--json")
    checks = {c["check"]: c for c in json.loads(run.stdout)}
    assert run.returncode == 0, run.stdout
    assert set(checks) == {
        "home", "settings", "store", "registry", "keyring", "model", "documents", "research", "skills"
    }  # fmt: skip
    assert checks["model"]["status"] == "ok" and "offline" in checks["model"]["detail"]
    assert checks["documents"]["status"] == "ok" and "Noto Sans CJK" in checks["documents"]["detail"]
    assert checks["research"]["status"] == "warn" and "search_provider" in checks["research"]["fix"]
    assert checks["skills"]["status"] == "ok" and "lecture-handout" in checks["skills"]["detail"]


def test_doctor_names_a_broken_skill(tmp_path: Path) -> None:
    folder = tmp_path / "home" / "skills" / "broken"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("no front matter\n", encoding="utf-8")
    run = tether(tmp_path / "home", "doctor")
    assert "warn skills" in run.stdout and "front matter" in run.stdout


def test_doctor_says_what_to_fix(tmp_path: Path) -> None:
    home = settings_file(tmp_path / "home", '[model]\nprovider = "deepseek"\nmodel = "deepseek-chat"\n')
    run = tether(home, "doctor")
    assert run.returncode == 1 and "fail model" in run.stdout and "tether auth set deepseek" in run.stdout
    run = tether(home, "doctor", PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring")
    assert "warn keyring" in run.stdout and "TETHER_API_KEY_" in run.stdout


def test_doctor_reports_a_settings_error_as_one_naming_file_key_and_what_is_allowed(tmp_path: Path) -> None:
    home = settings_file(
        tmp_path / "home", '[store]\nkeep_days = -3\nkeep_dayz = 2\n[agent]\nlanguage = "fr"\n'
    )
    run = tether(home, "doctor", "--json")
    checks = {c["check"]: c for c in json.loads(run.stdout)}
    assert run.returncode == 1 and checks["settings"]["status"] == "fail"
    detail = checks["settings"]["detail"]
    assert str(home / "settings.toml") in detail, detail
    assert "[store].keep_days = -3" in detail and "greater than or equal to 0" in detail, detail
    assert "[store].keep_dayz" in detail and "did you mean 'keep_days'" in detail, detail
    assert "[agent].language = 'fr'" in detail and "'en' or 'zh'" in detail, (
        detail
    )  # every problem, not the first
    assert checks["store"]["status"] != "fail" and "database_url" not in json.dumps(checks["store"]), checks
    run = tether(settings_file(tmp_path / "env", ""), "doctor", "--json", TETHER_KEEP_DAYS="-1")
    checks = {c["check"]: c for c in json.loads(run.stdout)}
    assert (
        "TETHER_KEEP_DAYS" in checks["settings"]["detail"] and "TETHER_KEEP_DAYS" in checks["settings"]["fix"]
    )


def test_doctor_reaches_the_model_with_one_cheap_request(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    home = settings_file(
        tmp_path / "home",
        f'[model]\nprovider = "vllm"\nmodel = "gpt-4o-mini"\nbase_url = "{fake_openai.url}"\n',
    )
    run = tether(home, "doctor", "--json")
    model = next(c for c in json.loads(run.stdout) if c["check"] == "model")
    assert run.returncode == 0 and model["status"] == "ok" and "reachable" in model["detail"]
    assert fake_openai.requests == []  # no completion was asked for: only GET /models
    fake_openai.models_answer = (200, {"data": [{"id": "llama-3"}]})
    model = next(c for c in json.loads(tether(home, "doctor", "--json").stdout) if c["check"] == "model")
    assert model["status"] == "warn" and "llama-3" in model["detail"]
    fake_openai.models_answer = (401, {"error": {"message": "bad key"}})
    run = tether(home, "doctor", "--json")
    model = next(c for c in json.loads(run.stdout) if c["check"] == "model")
    assert run.returncode == 1 and model["status"] == "fail" and "refused" in model["detail"]
    fake_openai.close()
    run = tether(home, "doctor", "--json")
    model = next(c for c in json.loads(run.stdout) if c["check"] == "model")
    assert model["status"] == "fail" and "start the server" in model["fix"]


def test_doctor_finds_a_store_damaged_past_its_first_pages(tmp_path: Path) -> None:
    """Every other command failed on such a file while doctor opened it, read one row and said ok."""
    home = tmp_path / "home"
    for _ in range(3):
        assert tether(home, "task", "run", "demo.status", "--json").returncode == 0
    database = home / "tether.db"
    assert tether(home, "job", "list", "--json").returncode == 0
    size = database.stat().st_size
    assert size > 8 * 4096
    with database.open("r+b") as handle:  # the header and the first pages stay intact
        handle.seek(size // 2)
        handle.write(b"\xde\xad\xbe\xef" * 1024)
    run = tether(home, "doctor", "--json")
    store = next(c for c in json.loads(run.stdout) if c["check"] == "store")
    assert run.returncode == 1 and store["status"] == "fail", store
    assert "damaged" in store["detail"] and "move it away" in store["fix"], store
