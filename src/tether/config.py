"""Where tether keeps its state, and the settings that tune it.

All state lives in one folder, the tether home: ``--home``, else ``$TETHER_HOME``, else ``~/.tether`` on
POSIX and ``%LOCALAPPDATA%\\tether`` on Windows. The home is private to its owner: folders 0700, files
0600 (``private_dir``; the file writers use ``PRIVATE_FILE``).

Settings come from their defaults here, then ``settings.toml`` in the home, then ``TETHER_<NAME>``
environment variables (e.g. ``TETHER_HANDSHAKE_TIMEOUT_S=5``). Every section is a validated model:
unknown sections and keys are refused with a suggestion, numbers must be finite and within range, and
types are strict (``true`` is not a number, ``"5"`` in the file is not a number either; environment
variables are text and parsed as the setting's type).
"""

from __future__ import annotations

import contextvars
import difflib
import os
import re
import sys
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from tether.errors import ConfigError
from tether.resilience import BreakerPolicy, RetryPolicy

_RETRY, _BREAKER = RetryPolicy(), BreakerPolicy()  # the defaults live there, once

HOME_ENV = "TETHER_HOME"
SETTING_PREFIX = "TETHER_"  # a setting's environment variable: TETHER_<NAME>
SETTINGS_FILE = "settings.toml"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def default_home() -> Path:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "tether"
    return Path.home() / ".tether"


def private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents owner-only; an existing folder keeps its mode."""
    if not path.is_dir():
        private_dir(path.parent)
        path.mkdir(mode=PRIVATE_DIR, exist_ok=True)
    return path


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """The tether home: the argument, else ``$TETHER_HOME``, else the per-user default. Created if missing.

    An empty path is refused rather than read as the current folder.
    """
    if home is not None:
        raw = os.fspath(home)
        source = "--home"
    else:
        raw = os.environ.get(HOME_ENV)
        source = HOME_ENV
        if raw is None:
            raw, source = str(default_home()), "the default home"
    if not raw.strip():
        raise ConfigError(f"{source} is empty: give the tether home as a folder path, or unset it")
    if "\x00" in raw:
        raise ConfigError(f"{source} contains a NUL character")
    path = Path(raw).expanduser().resolve()
    try:
        created = not path.exists()
        path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        if created:
            os.chmod(path, PRIVATE_DIR)  # mkdir's mode is filtered by the umask
    except OSError as exc:
        raise ConfigError(f"cannot create the tether home {str(path)!r}: {exc.strerror or exc}") from exc
    if not path.is_dir():
        raise ConfigError(f"the tether home {str(path)!r} is not a folder")
    return path


PositiveSeconds = Annotated[float, Field(gt=0, le=86_400)]
Count = Annotated[int, Field(ge=1, le=1_000_000)]
CallerName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class _Section(BaseModel):
    """One ``[section]`` of settings.toml. Constructing one with bad values raises ``ConfigError``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
    section: ClassVar[str]

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            if _KNOWS_ORIGINS.get():  # ``load_section`` names where each value came from
                raise
            raise ConfigError(_explain(exc, self.section, {})) from exc

    @classmethod
    def load(cls, home: Path, environ: dict[str, str] | None = None) -> Self:
        return load_section(cls, home, environ)


# True while ``load_section`` validates: it explains an invalid value with the file or variable it came
# from, so ``_Section.__init__`` lets pydantic's error through (pydantic calls a custom __init__ on
# ``model_validate`` too).
_KNOWS_ORIGINS: contextvars.ContextVar[bool] = contextvars.ContextVar("knows_origins", default=False)


class Settings(_Section):
    """``[execution]``: workers, stops and the danger policy."""

    section: ClassVar[str] = "execution"

    # A worker must publish its first state (running or rejected) within this long after it starts.
    handshake_timeout_s: PositiveSeconds = 15.0
    # Stop escalation: cooperative (stop.requested) → SIGINT/CTRL_BREAK → kill the process tree.
    stop_grace_cooperative_s: PositiveSeconds = 3.0
    stop_grace_interrupt_s: PositiveSeconds = 2.0
    stop_grace_kill_s: PositiveSeconds = 2.0
    # How often a non-detached worker checks that the process that started it is still alive.
    parent_poll_s: Annotated[float, Field(gt=0, le=60)] = 0.25
    # Start workers from a pre-started fork server (POSIX only); off → one fresh interpreter per task.
    forkserver: bool = True
    # Lines of worker.log quoted when a worker dies without a result.
    log_tail_lines: Annotated[int, Field(ge=0, le=10_000)] = 20
    # Callers that are a person acting directly (a typed command): `caution` tasks need no confirmation
    # for them. Every other caller (a model: agent, mcp, a supervisor run) asks the person first.
    direct_callers: Annotated[tuple[CallerName, ...], Field(strict=False)] = ("cli",)
    # Callers that act for the person who owns this home (a typed command, a click on the web page of
    # `tether serve`): they may see and stop every job of the home, whatever started it (contract 9).
    # Other callers see only tasks exposed to them.
    operator_callers: Annotated[tuple[CallerName, ...], Field(strict=False)] = ("cli", "web")
    # Environment variables handed to workers beyond the built-in allowlist (names, not values).
    worker_env: Annotated[tuple[EnvName, ...], Field(strict=False)] = ()


class StoreSettings(_Section):
    """``[store]``: the database that holds the readable record, and how long records are kept."""

    section: ClassVar[str] = "store"

    # SQLAlchemy URL; empty = SQLite in the home. A password never goes here (see credentials).
    database_url: Annotated[str, Field(max_length=2000)] = ""
    # How long a writer waits for another process's write transaction before giving up.
    busy_timeout_s: PositiveSeconds = 10.0
    # Retention of ended executions (their folders, job rows) and of the event log; 0 keeps forever.
    keep_days: Annotated[float, Field(ge=0, le=36_500)] = 30.0
    keep_executions: Annotated[int, Field(ge=0, le=10_000_000)] = 5_000
    keep_events: Annotated[int, Field(ge=0, le=100_000_000)] = 200_000


class ModelSettings(_Section):
    """``[model]``: which model answers. No ``[model]`` at all means the offline planner (no key, no
    network); a ``[model]`` section that does not name its ``model`` is an error, never a silent fallback."""

    section: ClassVar[str] = "model"

    # A known preset (openai, deepseek, qwen, moonshot, zhipu, ollama, vllm, lm-studio, llama-cpp) or any
    # name with a base_url; it is also the keyring entry of the key.
    provider: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.-]{0,39}$")] = "openai"
    model: Annotated[str, Field(max_length=200)] = ""
    # Empty: the provider's preset. A provider with no preset must give one.
    base_url: Annotated[str, Field(pattern=r"^(https?://\S+)?$", max_length=2000)] = ""
    json_decisions: bool = False  # for models without native tool calls
    # The model takes images (image parts in a user message): sent the images a person attaches. False:
    # a turn with images is answered "this model cannot see images" and nothing runs.
    images: bool = False
    # Sampling temperature: low, for choosing tools and arguments (not sent to reasoning models,
    # which refuse it).
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.2
    # None: 120 s for a hosted service, 600 s for a server on this machine or the local network.
    timeout_s: PositiveSeconds | None = None
    # The first token of a streamed answer: None is 60 s hosted, 300 s local (a cold prompt on a CPU
    # takes minutes); a server that says nothing for this long is tried once more, then given up.
    first_token_timeout_s: PositiveSeconds | None = None
    retry_max_attempts: Annotated[int, Field(ge=1, le=20)] = _RETRY.max_attempts
    retry_base_delay_s: PositiveSeconds = _RETRY.base_delay_s
    retry_max_delay_s: PositiveSeconds = _RETRY.max_delay_s
    breaker_failure_threshold: Annotated[int, Field(ge=1, le=1000)] = _BREAKER.failure_threshold
    breaker_recovery_s: PositiveSeconds = _BREAKER.recovery_s
    breaker_half_open_probes: Annotated[int, Field(ge=1, le=100)] = _BREAKER.half_open_probes

    @model_validator(mode="after")
    def _named(self) -> Self:
        defaults = type(self).model_fields
        changed = [n for n, f in defaults.items() if n != "model" and getattr(self, n) != f.default]
        if not self.model and changed:
            raise ValueError(
                f"[model] sets {', '.join(changed)} but not `model`: name the model (e.g. "
                'model = "deepseek-chat"), or remove [model] to use the offline model'
            )
        return self

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.retry_max_attempts,
            base_delay_s=self.retry_base_delay_s,
            max_delay_s=self.retry_max_delay_s,
        )

    def breaker_policy(self) -> BreakerPolicy:
        return BreakerPolicy(
            failure_threshold=self.breaker_failure_threshold,
            recovery_s=self.breaker_recovery_s,
            half_open_probes=self.breaker_half_open_probes,
        )


LANGUAGES = ("en", "zh")
MEMORY_MODES = ("sqlite", "ephemeral")


class AgentSettings(_Section):
    """``[agent]``: the conversation loop's limits, memory, language and what it may see."""

    section: ClassVar[str] = "agent"

    language: Literal["en", "zh"] = "en"
    max_steps: Count = 12  # model decisions per turn before the manager is asked to extend
    extend_by: Count = 6
    max_steps_ceiling: Count = 40  # hard ceiling, whatever the manager says
    keep_last_messages: Count = 12
    compress_after_messages: Count = 24
    compress_after_chars: Count = 12_000
    summary_max_chars: Count = 2_000
    memory: Literal["sqlite", "ephemeral"] = "sqlite"
    # Which jobs the agent sees and controls: those its own thread started ("thread"), or every job of
    # a task exposed to it ("caller").
    job_scope: Literal["thread", "caller"] = "thread"
    # A team (``agents.delegate``): how deep a chain of delegations may go (manager → agent is 1), and
    # how many model decisions one delegated turn may take (it is not extended: it reports instead).
    delegation_max_depth: Annotated[int, Field(ge=1, le=8)] = 2
    delegation_max_steps: Count = 10
    # Memory (``agent/recall.py``): how many memories of earlier threads a turn may recall (0: none), and
    # how many characters of them its model reads at most.
    recall_top_k: Annotated[int, Field(ge=0, le=20)] = 3
    recall_max_chars: Annotated[int, Field(ge=0, le=20_000)] = 1500
    # "on": with an embedding model installed (``tether[semantic]``), memories are found by meaning too.
    # Off by default: measured, it adds little here (``agent/recall.py``, MIN_SIMILARITY).
    recall_semantic: Literal["on", "off"] = "off"
    # Models a delegation may name beyond those this home uses already (its [model], `offline`, and
    # the models its agents name): `provider/model` or a model name. Any other name resolves to the
    # home's default model, said so in the trace.
    delegation_models: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,199}$")]] = Field(
        default_factory=list, max_length=64
    )

    @model_validator(mode="after")
    def _ceiling(self) -> Self:
        if self.max_steps_ceiling < self.max_steps:
            raise ValueError("max_steps_ceiling must be at least max_steps")
        return self


class InitiativeSettings(_Section):
    """``[initiative]``: when agents speak first, and when notifications wait (``agent/decider.py``)."""

    section: ClassVar[str] = "initiative"

    enabled: bool = True  # signals are weighed and proactive messages posted
    threshold: Annotated[float, Field(ge=0.3, le=0.95)] = 0.5  # an agent's start (its ratings move it)
    max_per_hour: Annotated[int, Field(ge=0, le=60)] = 3  # proactive messages an agent posts, at most
    long_job_s: PositiveSeconds = 600.0  # work that ran this long (10 min) is worth a word when it ends
    # Local time "HH:MM-HH:MM" (may span midnight): notifications wait until it ends ("" = none).
    quiet_hours: Annotated[str, Field(pattern=r"^(([01]\d|2[0-3]):[0-5]\d-([01]\d|2[0-3]):[0-5]\d)?$")] = ""
    # The page's address as the person opens it (links in notifications lead there), e.g. http://host:8765.
    page_url: Annotated[str, Field(pattern=r"^(https?://\S+)?$", max_length=2000)] = ""
    # A Telegram Bot API server of your own (``telegram-bot-api --local``) instead of api.telegram.org.
    telegram_api: Annotated[str, Field(pattern=r"^(https?://\S+)?$", max_length=2000)] = ""


class ResearchSettings(_Section):
    """``[research]``: web search, and how far a page read may reach (``tether.toolkits.web``).

    Reads go to public addresses only: loopback, private, link-local, CGNAT, multicast, reserved and
    cloud-metadata addresses are refused unless ``allow_private_networks`` or ``allow_hosts`` says so.
    """

    section: ClassVar[str] = "research"

    # "" = no web search (the task is left off); tavily/brave keys: `tether auth set tavily|brave`.
    search_provider: Literal["", "searxng", "tavily", "brave"] = ""
    # A SearXNG instance (its JSON API must be enabled); its exact host:port is reachable by search.
    searxng_url: Annotated[str, Field(pattern=r"^(https?://\S+)?$", max_length=2000)] = ""
    fetch_max_bytes: Annotated[int, Field(ge=1024, le=1024**3)] = 5 * 1024 * 1024
    fetch_timeout_s: Annotated[float, Field(gt=0, le=600)] = 20.0  # one whole read, redirects included
    fetch_max_redirects: Annotated[int, Field(ge=0, le=20)] = 5
    # Relaxations, off by default: private/loopback/link-local networks (never cloud metadata), and
    # hosts, host:port or CIDRs that are reachable whatever they resolve to.
    allow_private_networks: bool = False
    allow_hosts: Annotated[
        tuple[Annotated[str, Field(pattern=r"^[A-Za-z0-9._:/\[\]-]{1,300}$")], ...], Field(strict=False)
    ] = ()


class WorkspaceSettings(_Section):
    """``[workspace]``: the folders the workspace tasks may touch, and how much they read or write."""

    section: ClassVar[str] = "workspace"

    # Folders the agent may touch (``~`` expanded, absolute, existing). None: ``<home>/workspace``,
    # created private on first use. Several roots are addressed as ``<root-name>/relative/path``.
    roots: Annotated[
        tuple[Annotated[str, Field(min_length=1, max_length=4096)], ...], Field(strict=False)
    ] = ()
    max_read_bytes: Annotated[int, Field(ge=1, le=2**31)] = 64 * 1024 * 1024  # largest file opened to read
    max_read_chars: Annotated[int, Field(ge=100, le=10_000_000)] = 60_000  # text returned, then clipped
    max_write_bytes: Annotated[int, Field(ge=1, le=2**31)] = 16 * 1024 * 1024
    max_results: Annotated[int, Field(ge=1, le=100_000)] = 200  # entries from list, find and grep


SHELL_PLACEHOLDER = r"\{([a-z_][a-z0-9_]{0,31})\}"
SHELL_TOKEN = r"\{\{|\}\}|" + SHELL_PLACEHOLDER + r"|[{}]"  # {{ and }} are literal braces
SHELL_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


class ShellCommand(BaseModel):
    """One ``[[shell.commands]]`` entry: an allow-listed program and the only argv it may receive.

    ``args`` are fixed strings that may hold ``{placeholder}``s (``{{``/``}}`` for literal braces); each
    placeholder's value must fully match its regex in ``params``. A standalone placeholder value never
    starts with ``-`` unless the placeholder is listed in ``options`` (no ``--flag=`` smuggling)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$")]
    program: Annotated[str, Field(min_length=1, max_length=4096)]
    args: Annotated[
        tuple[Annotated[str, Field(max_length=4096)], ...], Field(strict=False, max_length=64)
    ] = ()
    params: Annotated[
        dict[str, Annotated[str, Field(min_length=1, max_length=1000)]], Field(max_length=32)
    ] = {}
    options: Annotated[tuple[str, ...], Field(strict=False)] = ()
    cwd: Annotated[str, Field(max_length=4096)] = ""  # a workspace path; "" = the first root
    env: Annotated[tuple[EnvName, ...], Field(strict=False)] = SHELL_ENV  # passed through when set
    timeout_s: PositiveSeconds | None = None  # None: 60 s in the foreground, no limit in the background
    background: bool = False  # started with shell.start (streams its lines), never with shell.run
    danger: Literal["caution", "destructive"] = "caution"
    description: Annotated[str, Field(max_length=500)] = ""

    @model_validator(mode="after")
    def _placeholders(self) -> Self:
        used: list[str] = []
        for arg in self.args:
            if "\x00" in arg:
                raise ValueError(f"command {self.name!r}: an argument contains a NUL character")
            for token in re.finditer(SHELL_TOKEN, arg):
                if token.group(1):
                    used.append(token.group(1))
                elif len(token.group(0)) == 1:
                    raise ValueError(
                        f"command {self.name!r}: argument {arg!r} has a lone brace: write {{{{ or }}}} "
                        "for a literal one, {name} (lowercase) for a placeholder"
                    )
        undefined = sorted(set(used) - set(self.params))
        unused = sorted(set(self.params) - set(used))
        if undefined or unused:
            raise ValueError(
                f"command {self.name!r}: every {{placeholder}} in args needs a regex in params and every "
                f"param a placeholder (undefined: {undefined or 'none'}; unused: {unused or 'none'})"
            )
        for name, pattern in self.params.items():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"command {self.name!r}: params.{name} is not a regex: {exc}") from exc
        stray = sorted(set(self.options) - set(self.params))
        if stray:
            raise ValueError(f"command {self.name!r}: options names unknown placeholders {stray}")
        return self


class ShellSettings(_Section):
    """``[shell]``: the allow-listed commands (``[[shell.commands]]``); none means ``shell.*`` is off."""

    section: ClassVar[str] = "shell"

    commands: Annotated[tuple[ShellCommand, ...], Field(strict=False, max_length=200)] = ()
    max_output_chars: Annotated[int, Field(ge=100, le=1_000_000)] = 20_000  # kept in a result, then clipped
    max_line_chars: Annotated[int, Field(ge=20, le=100_000)] = 2_000  # one streamed line

    @model_validator(mode="after")
    def _unique(self) -> Self:
        names = [command.name for command in self.commands]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"[[shell.commands]] names must be unique; repeated: {', '.join(twice)}")
        return self


class McpSettings(_Section):
    """``[mcp]``: other MCP servers whose chosen tools this home imports. Each ``[[mcp.servers]]`` entry is
    checked in full by ``tether.toolkits.mcp.servers`` (its fields and what they mean are there)."""

    section: ClassVar[str] = "mcp"

    servers: Annotated[tuple[dict[str, Any], ...], Field(strict=False, max_length=64)] = ()
    # Listing a server's tools (``tether mcp tools --refresh``): its start and its answer, at most.
    discovery_timeout_s: PositiveSeconds = 60.0


class WebSettings(_Section):
    """``[web]``: how long ``tether serve`` waits on a client, and how many it keeps (``interfaces/web``)."""

    section: ClassVar[str] = "web"

    # A request's line and headers must arrive within this long (of the connection, or of the previous
    # response on it), and its body within this long of its headers; past that it is answered 408.
    request_head_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 10.0
    request_body_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # A response the client has not taken for this long (it stopped reading) ends the connection.
    send_stall_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # Open connections at most; a new one beyond it replaces the one slowest to send its request.
    max_connections: Annotated[int, Field(ge=16, le=100_000)] = 256


class TelemetrySettings(_Section):
    """``[telemetry]``: OpenTelemetry traces of turns, model and tool calls and runs (``tether[otel]``,
    ``tether/telemetry.py``). The SDK's ``OTEL_*`` variables (headers, sampler, …) apply as it reads them
    in tether's own processes; a worker gets only ``TELEMETRY_VARIABLES`` of them."""

    section: ClassVar[str] = "telemetry"

    exporter: Literal["none", "otlp", "console"] = "none"  # none: nothing of OpenTelemetry is imported
    # OTLP/HTTP traces URL (http://127.0.0.1:4318/v1/traces); empty: OTEL_EXPORTER_OTLP_* or the SDK's own.
    otlp_endpoint: Annotated[str, Field(max_length=2000)] = ""
    service_name: Annotated[str, Field(min_length=1, max_length=200)] = "tether"


class ClusterSettings(_Section):
    """``[cluster]``: this home's place among several hosts that share one PostgreSQL store and one
    installation (``tether cluster join``; docs/deploy.md)."""

    section: ClassVar[str] = "cluster"

    # This home's name among the cluster's, unique across it: jobs run on a node, and only that node
    # signals their workers. Empty: the host's name.
    node: Annotated[str, Field(pattern=r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,62})?$")] = ""
    # How often a worker says it is alive and renews its hold on the resources it owns.
    heartbeat_s: Annotated[float, Field(ge=0.05, le=60)] = 1.0
    # A worker silent this long is lost: another takes over its work and its resources. A worker that
    # could not renew its hold for half of it stops starting work on them first.
    lease_s: Annotated[float, Field(ge=0.5, le=3600)] = 10.0
    # A worker asked to stop (SIGTERM, Ctrl-C) takes no new work and lets its running tool calls finish
    # for this long, then stops the rest; what it was running goes on at once on another worker.
    drain_s: Annotated[float, Field(ge=0, le=3600)] = 10.0
    # How many runs and conversation turns one executor runs at once; the rest wait in the queue for it
    # or for another executor, so a backlog spreads over the workers. One value for the installation
    # (DBOS keeps it with the queue): give every home the same.
    concurrency: Annotated[int, Field(ge=1, le=10_000)] = 16

    @model_validator(mode="after")
    def _lease_outlasts_beats(self) -> Self:
        if self.lease_s < 3 * self.heartbeat_s:
            raise ValueError(
                f"lease_s ({self.lease_s:g}) must be at least 3 heartbeats ({3 * self.heartbeat_s:g} s): "
                "a worker would lose its hold between two renewals"
            )
        return self


S = TypeVar("S", bound=_Section)

_SOME = (Settings, StoreSettings, ModelSettings, AgentSettings, InitiativeSettings, ResearchSettings)
_MORE = (WorkspaceSettings, ShellSettings, WebSettings, McpSettings, TelemetrySettings, ClusterSettings)
SECTIONS: dict[str, type[_Section]] = {section.section: section for section in (*_SOME, *_MORE)}


# The standard variables ``[telemetry]`` stands in for (``otlp_endpoint``, ``service_name``): a worker
# exports its own span, so it needs them to send it where its caller's spans go. Not the headers
# (``OTEL_EXPORTER_OTLP_HEADERS`` often holds a collector's key, which no worker gets).
TELEMETRY_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
)


def setting_variables() -> tuple[str, ...]:
    """Every variable a setting is read from (each ``TETHER_<NAME>``, and ``TELEMETRY_VARIABLES``): a
    worker inherits them (none is a secret), so a task sees the settings its starter sees
    (``TETHER_ROOTS=… tether run …`` reaches the workspace)."""
    names = (f"{SETTING_PREFIX}{name.upper()}" for cls in SECTIONS.values() for name in cls.model_fields)
    return (*names, *TELEMETRY_VARIABLES)


def read_settings_file(home: Path) -> dict[str, Any]:
    """The parsed settings.toml of ``home`` ({} when there is none); unknown sections are refused."""
    path = home / SETTINGS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from exc
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    for name, value in document.items():
        if name not in SECTIONS:
            raise ConfigError(f"{path}: unknown section [{name}]{_suggest(name, SECTIONS)}")
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: {name} must be a [{name}] section, not a single value")
    return document


def load_section(cls: type[S], home: Path, environ: dict[str, str] | None = None) -> S:
    """Defaults, then ``[section]`` of settings.toml, then ``TETHER_<NAME>`` environment variables."""
    environ = dict(os.environ if environ is None else environ)
    path = home / SETTINGS_FILE
    values: dict[str, Any] = dict(read_settings_file(home).get(cls.section, {}))
    for name in values:
        if name not in cls.model_fields:
            raise ConfigError(
                f"{path}: unknown setting [{cls.section}].{name}{_suggest(name, cls.model_fields)}"
            )
    origins = dict.fromkeys(values, f"{path} [{cls.section}]")
    knows = _KNOWS_ORIGINS.set(True)
    try:
        return _validated(cls, values, origins, environ)
    finally:
        _KNOWS_ORIGINS.reset(knows)


def _validated(cls: type[S], values: dict[str, Any], origins: dict[str, str], environ: dict[str, str]) -> S:
    """The file's values, then the environment's over them; an invalid one is named with its origin."""
    try:
        settings = cls.model_validate(values)  # the file's own types, strictly
    except ValidationError as exc:
        raise ConfigError(_explain(exc, cls.section, origins)) from exc
    overrides: dict[str, Any] = {}
    for name, info in cls.model_fields.items():
        variable = f"{SETTING_PREFIX}{name.upper()}"
        raw = environ.get(variable)
        if raw is None:
            continue
        try:
            if typing.get_origin(info.annotation) is tuple:
                overrides[name] = tuple(part.strip() for part in raw.split(",") if part.strip())
            else:
                overrides[name] = _from_text(info.annotation, raw)
        except ValidationError as exc:
            raise ConfigError(_explain(exc, cls.section, {name: variable}, field=name)) from exc
    if not overrides:
        return settings
    try:
        return cls.model_validate({**settings.model_dump(), **overrides})
    except ValidationError as exc:
        named = {name: f"{SETTING_PREFIX}{name.upper()}" for name in overrides}
        raise ConfigError(_explain(exc, cls.section, named)) from exc


def _from_text(annotation: Any, raw: str) -> Any:
    """An environment variable's text as the setting's type (its range is checked with the rest)."""
    adapter = TypeAdapter(annotation, config=ConfigDict(allow_inf_nan=False))
    return adapter.validate_strings(raw.strip())


def _suggest(name: str, known: Any) -> str:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{hint} Known: {', '.join(names)}"


def _explain(exc: ValidationError, section: str, origins: dict[str, str], *, field: str | None = None) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]] or ([field] if field else [])
        name = ".".join(loc)
        where = origins.get(loc[0] if loc else "", f"[{section}]")
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "finite_number":
            message = "must be a finite number"
        if name:
            shown = repr(error.get("input"))
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            parts.append(f"{where} {name}: {message} (got {shown})")
        else:
            parts.append(f"{where}: {message}")
    return "invalid setting: " + "; ".join(parts)
