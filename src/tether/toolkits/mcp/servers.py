"""The MCP servers one home configures (``[[mcp.servers]]`` in settings.toml), checked in full.

A server is either a ``command`` started over stdio in the worker of each call (and ended with it), or
a ``url`` spoken to over streamable HTTP. Secrets are only ever named here: ``secret_env`` (a command's
environment variables) and ``secret_headers`` (a URL's request headers) are read from the OS keyring,
each under ``mcp.<server>.<name in lowercase>`` (``tether auth set mcp.github.github_token``), or, on a
machine without one, from that entry's own variable (``TETHER_API_KEY_MCP_GITHUB_GITHUB_TOKEN``) in the
environment of the process that starts the call's worker.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tether.config import SETTINGS_FILE, EnvName, McpSettings, PositiveSeconds
from tether.credentials import secret_key
from tether.errors import ConfigError

# One segment of its tasks' ids (mcp.<name>.<tool>): short, so that a tool's function name for a model
# (mcp__<name>__<tool>) stays within the 64 characters providers allow.
SERVER_NAME = r"^[a-z][a-z0-9_]{0,15}$"
ToolPattern = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.*?/:-]{1,128}$")]  # a name, or a glob
DangerName = Literal["safe", "caution", "destructive"]
DEFAULT_TIMEOUT_S = 120.0


class McpServer(BaseModel):
    """One ``[[mcp.servers]]`` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=SERVER_NAME)]
    command: Annotated[str, Field(max_length=4096)] = ""
    args: Annotated[
        tuple[Annotated[str, Field(max_length=4096)], ...], Field(strict=False, max_length=128)
    ] = ()
    # Plain values for the command's environment: not secrets (settings.toml is no place for them).
    env: Annotated[dict[EnvName, Annotated[str, Field(max_length=4096)]], Field(max_length=64)] = {}
    secret_env: Annotated[tuple[EnvName, ...], Field(strict=False, max_length=32)] = ()
    cwd: Annotated[str, Field(max_length=4096)] = ""  # the command's folder; "" = the worker's
    url: Annotated[str, Field(pattern=r"^https?://\S+$", max_length=2000)] | Literal[""] = ""
    secret_headers: Annotated[
        tuple[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9-]{0,63}$")], ...],
        Field(strict=False, max_length=16),
    ] = ()
    # The allowlist: tool names as the server spells them, or globs ("read_*"). Empty: nothing imported.
    tools: Annotated[tuple[ToolPattern, ...], Field(strict=False, max_length=256)] = ()
    # A tool's danger by name or glob (the first that matches): raises the default caution, or lowers
    # it to safe; a tool the server marks destructive stays destructive whatever this says.
    danger: Annotated[dict[ToolPattern, DangerName], Field(max_length=256)] = {}
    # Tools (names or globs) that run in the background: a call answers with its job at once, its
    # progress streams, and it runs until it ends, is stopped or reaches timeout_s.
    background: Annotated[tuple[ToolPattern, ...], Field(strict=False, max_length=256)] = ()
    # readOnlyHint is the server's own word: only with this set does it make a tool safe.
    trust_read_only: bool = False
    timeout_s: PositiveSeconds = DEFAULT_TIMEOUT_S  # one call: the server's start and its answer

    @model_validator(mode="after")
    def _one_way_in(self) -> Self:
        if bool(self.command) == bool(self.url):
            raise ValueError("give either command (a program to start) or url, not both or neither")
        if self.url and (self.args or self.env or self.secret_env or self.cwd):
            raise ValueError("args, env, secret_env and cwd are for a command, not a url")
        if self.command and self.secret_headers:
            raise ValueError("secret_headers are for a url; a command takes secret_env")
        if "\x00" in self.command or any("\x00" in arg for arg in self.args):
            raise ValueError("the command contains a NUL character")
        clash = sorted(set(self.env) & set(self.secret_env))
        if clash:
            raise ValueError(f"{', '.join(clash)} is in both env and secret_env")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def secret_names(self) -> dict[str, str]:
        """Each secret's variable or header → its keyring entry."""
        return {name: secret_entry(self.name, name) for name in (*self.secret_env, *self.secret_headers)}

    def fingerprint(self) -> str:
        """What identifies the server a tool list came from: its command, arguments, folder and plain
        environment, or its URL (never a secret). A cached list whose fingerprint differs is stale."""
        what = {"command": self.command, "args": self.args, "cwd": self.cwd, "env": self.env, "url": self.url}
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def secret_entry(server: str, name: str) -> str:
    """The keyring entry of one secret: ``mcp.<server>.<name>`` in lowercase, ``-`` as ``_``."""
    return f"mcp.{server}.{re.sub(r'[^a-z0-9_]', '_', name.lower())}"


def stored_secrets(server: McpServer) -> dict[str, str | None]:
    """Each secret of ``server`` (variable or header → its value; None when it is not stored): the one
    answer to "is it stored" that its worker (``client.secrets_of``), ``tether mcp tools`` and the
    doctor share. The keyring counts, and so does the secret's own variable
    (``TETHER_API_KEY_MCP_<SERVER>_<NAME>``) in the environment of the process that starts the call's
    worker, which hands it to that worker alone (``TaskSpec.secrets``); the model's ``TETHER_API_KEY``
    never does."""
    return {name: secret_key(entry) for name, entry in server.secret_names().items()}


def load_servers(home: Path, environ: dict[str, str] | None = None) -> dict[str, McpServer]:
    """The home's servers by name; ``ConfigError`` naming the entry and the field that is wrong."""
    settings = McpSettings.load(home, environ)
    servers: dict[str, McpServer] = {}
    for index, raw in enumerate(settings.servers, start=1):
        server = server_of(raw, home, index)
        if server.name in servers:
            raise ConfigError(
                f"invalid setting: {home / SETTINGS_FILE} [[mcp.servers]]: names must be unique; "
                f"{server.name!r} is repeated"
            )
        servers[server.name] = server
    return servers


def server_of(raw: dict[str, Any], home: Path, index: int = 1) -> McpServer:
    name = raw.get("name")
    where = f"{home / SETTINGS_FILE} [[mcp.servers]] #{index}" + (
        f" {name!r}" if isinstance(name, str) else ""
    )
    try:
        return McpServer.model_validate(raw)
    except ValidationError as exc:
        parts = []
        for error in exc.errors(include_url=False):
            field = ".".join(str(part) for part in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            parts.append(f"{field}: {message}" if field else message)
        raise ConfigError(f"invalid setting: {where}: " + "; ".join(parts)) from exc
