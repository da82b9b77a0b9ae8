"""Settings are validated models: nothing malformed is silently accepted, every refusal says what to do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.config import AgentSettings, ModelSettings, Settings, StoreSettings, resolve_home
from tether.errors import ConfigError


def settings_file(home: Path, text: str) -> Path:
    (home / "settings.toml").write_text(text, encoding="utf-8")
    return home


def refused(load: object, *args: object, match: str) -> str:
    with pytest.raises(ConfigError, match=match) as info:
        load(*args)  # type: ignore[operator]
    return info.value.message


def test_defaults_load_from_an_empty_home(tmp_path: Path) -> None:
    assert Settings.load(tmp_path, {}) == Settings()
    assert AgentSettings.load(tmp_path, {}).job_scope == "thread"
    assert StoreSettings.load(tmp_path, {}).busy_timeout_s == 10.0
    assert Settings().direct_callers == ("cli",)


def test_file_then_environment(tmp_path: Path) -> None:
    settings_file(tmp_path, '[execution]\nparent_poll_s = 0.5\ndirect_callers = ["cli", "kiosk"]\n')
    assert Settings.load(tmp_path, {}).parent_poll_s == 0.5
    assert Settings.load(tmp_path, {}).direct_callers == ("cli", "kiosk")
    env = {"TETHER_PARENT_POLL_S": "0.1", "TETHER_DIRECT_CALLERS": "cli, me", "TETHER_FORKSERVER": "off"}
    loaded = Settings.load(tmp_path, env)
    assert (loaded.parent_poll_s, loaded.direct_callers, loaded.forkserver) == (0.1, ("cli", "me"), False)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('[modle]\nmodel = "gpt-4o"\n', r"unknown section \[modle\]; did you mean 'model'"),
        ("[model]\nmodle = 'x'\n", r"unknown setting \[model\].modle; did you mean 'model'"),
        ("[execution]\nparent_poll_s = nan\n", "finite"),
        ("[execution]\nparent_poll_s = inf\n", "finite"),
        ("[execution]\nparent_poll_s = -1.0\n", "greater than 0"),
        ('[execution]\nparent_poll_s = "0.5"\n', "valid number"),
        ("[execution]\nlog_tail_lines = true\n", "valid integer"),
        ("[execution]\nforkserver = 1\n", "valid boolean"),
        ('[execution]\ndirect_callers = ["a b"]\n', "pattern"),
        ('[agent]\nlanguage = "fr"\n', "'en' or 'zh'"),
        ("[agent]\nmax_steps = 50\n", "max_steps_ceiling must be at least max_steps"),
        ('[model]\nbase_url = "ftp://x"\n', "pattern"),
        ("[execution\n", "not valid TOML"),
        ("execution = 3\n", "must be a \\[execution\\] section"),
    ],
)
def test_a_malformed_settings_file_is_refused_with_the_reason(tmp_path: Path, text: str, match: str) -> None:
    settings_file(tmp_path, text)
    section = {"agent": AgentSettings, "model": ModelSettings}.get(text.strip("[").split("]")[0], Settings)
    refused(section.load, tmp_path, {}, match=match)


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("TETHER_PARENT_POLL_S", "inf", "TETHER_PARENT_POLL_S parent_poll_s: must be a finite number"),
        ("TETHER_PARENT_POLL_S", "nan", "finite"),
        ("TETHER_PARENT_POLL_S", "0", "greater than 0"),
        ("TETHER_FORKSERVER", "maybe", "boolean"),
        ("TETHER_LOG_TAIL_LINES", "1.5", "integer"),
    ],
)
def test_a_malformed_environment_variable_is_refused_and_named(name: str, value: str, match: str) -> None:
    refused(Settings.load, Path("/nonexistent-home"), {name: value}, match=match)


def test_constructing_settings_in_code_is_validated_too() -> None:
    with pytest.raises(ConfigError, match="finite"):
        Settings(parent_poll_s=float("inf"))
    with pytest.raises(ConfigError, match="valid number"):
        Settings(parent_poll_s=True)  # type: ignore[arg-type]


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.text(max_size=8) | st.booleans())
def test_any_value_either_loads_within_range_or_is_refused(value: object) -> None:
    try:
        settings = Settings(stop_grace_kill_s=value)  # type: ignore[arg-type]
    except ConfigError:
        return
    assert isinstance(settings.stop_grace_kill_s, float) and 0 < settings.stop_grace_kill_s <= 86_400


def test_an_empty_home_is_refused_not_read_as_the_current_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="empty"):
        resolve_home("")
    monkeypatch.setenv("TETHER_HOME", " ")
    with pytest.raises(ConfigError, match="TETHER_HOME is empty"):
        resolve_home()


def test_a_new_home_is_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        home = resolve_home(tmp_path / "new" / "home")
    finally:
        os.umask(old)
    assert home.stat().st_mode & 0o777 == 0o700


def test_an_invalid_setting_names_the_file_or_the_variable_it_came_from(tmp_path: Path) -> None:
    """Every command (not only doctor) says where a bad value was set."""
    from tether.config import StoreSettings, load_section

    (tmp_path / "settings.toml").write_text("[store]\nkeep_days = -1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"settings\.toml \[store\] keep_days: .*greater than or equal"):
        load_section(StoreSettings, tmp_path, environ={})
    (tmp_path / "settings.toml").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"TETHER_KEEP_DAYS keep_days: .*greater than or equal to 0"):
        load_section(StoreSettings, tmp_path, environ={"TETHER_KEEP_DAYS": "-2"})
    with pytest.raises(ConfigError, match=r"\[store\] keep_days"):  # built in code: the section names it
        StoreSettings(keep_days=-3)
