"""Where tether keeps its state, and the settings that tune it.

All state lives in one folder, the tether home: ``$TETHER_HOME`` if set, else ``~/.tether`` on POSIX and
``%LOCALAPPDATA%\\tether`` on Windows. Settings come from their defaults here, then ``settings.toml`` in
the home, then ``TETHER_<NAME>`` environment variables (e.g. ``TETHER_HANDSHAKE_TIMEOUT_S=5``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.errors import ConfigError

HOME_ENV = "TETHER_HOME"
SETTINGS_FILE = "settings.toml"


def default_home() -> Path:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "tether"
    return Path.home() / ".tether"


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The tether home: the argument, else ``$TETHER_HOME``, else the per-user default. Created if missing."""
    chosen = Path(home) if home is not None else Path(os.environ.get(HOME_ENV) or default_home())
    path = chosen.expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the tether home {str(path)!r}: {exc.strerror}") from exc
    return path


def installation_id(home: Path) -> str:
    """A short stable id of one tether home; it scopes locks so two homes never share one."""
    return hashlib.sha256(str(home).encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every tunable limit, with its default stated once here."""

    # A worker must publish its first state (running or rejected) within this long after it starts.
    handshake_timeout_s: float = 15.0
    # Stop escalation: cooperative (stop.requested) → SIGINT/CTRL_BREAK → kill the process tree.
    stop_grace_cooperative_s: float = 3.0
    stop_grace_interrupt_s: float = 2.0
    stop_grace_kill_s: float = 2.0
    # How often a non-detached worker checks that the process that started it is still alive.
    parent_poll_s: float = 0.25
    # Start workers from a pre-started fork server (POSIX only); off → one fresh interpreter per task.
    forkserver: bool = True
    # Lines of worker.log quoted when a worker dies without a result.
    log_tail_lines: int = 20

    def __post_init__(self) -> None:
        _positive(self)

    @classmethod
    def load(cls, home: Path, environ: dict[str, str] | None = None) -> Settings:
        return load_section(cls, home, "execution", environ)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSettings:
    """``[model]``: which model answers. No ``model`` means the offline planner (no key, no network)."""

    provider: str = "openai"  # names the key in the OS keyring
    model: str = ""
    base_url: str = "https://api.openai.com/v1"
    json_decisions: bool = False  # for models without native tool calls
    timeout_s: float = 120.0
    retry_max_attempts: int = 4
    retry_base_delay_s: float = 0.5
    retry_max_delay_s: float = 20.0
    breaker_failure_threshold: int = 5
    breaker_recovery_s: float = 30.0
    breaker_half_open_probes: int = 1

    def __post_init__(self) -> None:
        _positive(self)

    @classmethod
    def load(cls, home: Path, environ: dict[str, str] | None = None) -> ModelSettings:
        return load_section(cls, home, "model", environ)


LANGUAGES = ("en", "zh")
MEMORY_MODES = ("sqlite", "ephemeral")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    """``[agent]``: the conversation loop's limits, memory and language."""

    language: str = "en"
    max_steps: int = 12  # model decisions per turn before the manager is asked to extend
    extend_by: int = 6
    max_steps_ceiling: int = 40  # hard ceiling, whatever the manager says
    keep_last_messages: int = 12
    compress_after_messages: int = 24
    compress_after_chars: int = 12_000
    summary_max_chars: int = 2_000
    memory: str = "sqlite"

    def __post_init__(self) -> None:
        _positive(self)
        if self.language not in LANGUAGES:
            raise ConfigError(
                f"setting language must be one of {', '.join(LANGUAGES)}, got {self.language!r}"
            )
        if self.memory not in MEMORY_MODES:
            raise ConfigError(f"setting memory must be one of {', '.join(MEMORY_MODES)}, got {self.memory!r}")
        if self.max_steps_ceiling < self.max_steps:
            raise ConfigError("setting max_steps_ceiling must be at least max_steps")

    @classmethod
    def load(cls, home: Path, environ: dict[str, str] | None = None) -> AgentSettings:
        return load_section(cls, home, "agent", environ)


def _positive(settings: object) -> None:
    for spec in dataclasses.fields(settings):  # type: ignore[arg-type]
        value = getattr(settings, spec.name)
        if isinstance(value, float | int) and not isinstance(value, bool) and value <= 0:
            raise ConfigError(f"setting {spec.name} must be positive, got {value}")


def load_section(cls: Any, home: Path, section: str, environ: dict[str, str] | None = None) -> Any:
    """Defaults, then ``[section]`` of settings.toml, then ``TETHER_<NAME>`` environment variables."""
    environ = dict(os.environ if environ is None else environ)
    values: dict[str, Any] = {}
    path = home / SETTINGS_FILE
    if path.exists():
        try:
            values.update(tomllib.loads(path.read_text(encoding="utf-8")).get(section, {}))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    known = {spec.name: spec for spec in dataclasses.fields(cls)}
    for name in list(values):
        if name not in known:
            raise ConfigError(f"{path}: unknown setting [{section}].{name}; known: {', '.join(known)}")
    for name in known:
        raw = environ.get(f"TETHER_{name.upper()}")
        if raw is not None:
            values[name] = raw
    return cls(**{name: _coerce(name, known[name].type, value) for name, value in values.items()})


def _coerce(name: str, kind: object, value: object) -> Any:
    text = str(value).strip().lower()
    try:
        if kind in (bool, "bool"):
            if isinstance(value, bool):
                return value
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if kind in (int, "int"):
            return int(text)
        if kind in (str, "str"):
            return str(value).strip()
        return float(text)
    except ValueError:
        raise ConfigError(f"setting {name}: {value!r} is not a valid {kind}") from None
