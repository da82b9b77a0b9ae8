"""The allow-listed commands of one home, and the only argv each may be given.

``[[shell.commands]]`` in settings.toml (validated structurally by ``tether.config.ShellCommand``) is
loaded here once more with what needs the machine: ``program`` is resolved to an absolute, executable
file (a bare name through ``shutil.which`` on the worker's ``PATH``), ``cwd`` must be a folder inside
the workspace roots. ``build_argv`` substitutes a call's values into the fixed ``args``: every value
must fully match its placeholder's regex, never holds a control character, and a value that stands
as a whole argument never starts with ``-`` unless the placeholder is listed in ``options``. There is
no shell anywhere: the argv list goes to ``subprocess`` as is.

May import: ``tether.config``, ``tether.errors``, ``tether.toolkits.workspace.paths``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.config import SHELL_PLACEHOLDER, SHELL_TOKEN, ShellCommand, ShellSettings
from tether.errors import ConfigError, TaskFailed
from tether.toolkits.workspace.paths import PathRefused, Roots

MAX_VALUE_CHARS = 4096
FOREGROUND_TIMEOUT_S = 60.0  # a foreground command without timeout_s
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PLACEHOLDER = re.compile(SHELL_PLACEHOLDER)
_TOKEN = re.compile(SHELL_TOKEN)


class ArgumentRefused(TaskFailed):
    """A value that the command's allowlist does not accept; the message names the rule."""

    code = "argument_refused"


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    name: str
    program: str  # absolute
    args: tuple[str, ...]
    patterns: Mapping[str, re.Pattern[str]]
    options: frozenset[str]
    cwd: Path
    env: tuple[str, ...]
    timeout_s: float | None
    background: bool
    destructive: bool
    description: str

    def describe(self) -> dict[str, object]:
        """What a model needs to call it: placeholders with their patterns."""
        return {
            "name": self.name,
            "description": self.description,
            "argv": [os.path.basename(self.program), *self.args],
            "args": {name: pattern.pattern for name, pattern in self.patterns.items()},
            "background": self.background,
            "danger": "destructive" if self.destructive else "caution",
        }


def load_commands(home: Path) -> dict[str, Command]:
    """The home's allow-listed commands by name; ``ConfigError`` naming the command that is wrong."""
    settings = ShellSettings.load(home)
    if not settings.commands:
        return {}
    roots = Roots.load(home)
    return {entry.name: _command(entry, roots) for entry in settings.commands}


def _command(entry: ShellCommand, roots: Roots) -> Command:
    where = f"[[shell.commands]] {entry.name!r}"
    program = entry.program
    if os.path.isabs(program):
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise ConfigError(f"{where}: program {program!r} is not an executable file")
    elif "/" in program or "\\" in program:
        raise ConfigError(f"{where}: program must be an absolute path or a bare name, got {program!r}")
    else:
        found = shutil.which(program)
        if found is None:
            raise ConfigError(f"{where}: program {program!r} is not found on PATH; give its absolute path")
        program = os.path.abspath(found)
    try:
        cwd = roots.resolve(entry.cwd or ".", must_exist=True)
    except PathRefused as exc:
        raise ConfigError(f"{where}: cwd: {exc.message}") from None
    if not cwd.is_dir():
        raise ConfigError(f"{where}: cwd {entry.cwd!r} is not a folder")
    return Command(
        name=entry.name,
        program=program,
        args=entry.args,
        patterns={name: re.compile(pattern) for name, pattern in entry.params.items()},
        options=frozenset(entry.options),
        cwd=cwd,
        env=entry.env,
        timeout_s=entry.timeout_s,
        background=entry.background,
        destructive=entry.danger == "destructive",
        description=entry.description,
    )


def pick(commands: Mapping[str, Command], name: str, *, background: bool) -> Command:
    """The command called ``name``, for ``shell.start`` (background) or ``shell.run``."""
    command = commands.get(name)
    if command is None:
        allowed = ", ".join(sorted(commands)) or "none"
        raise ArgumentRefused(
            f"{name!r} is not an allow-listed command; allowed: {allowed}",
            param="command",
            allowed=sorted(commands),
        )
    if command.background != background:
        other = "shell.start" if command.background else "shell.run"
        kind = "a background" if command.background else "a foreground"
        raise ArgumentRefused(f"{name!r} is {kind} command: use {other}", param="command")
    return command


def build_argv(command: Command, values: Mapping[str, object]) -> list[str]:
    """``[program, *args]`` with the values put in; ``ArgumentRefused`` for anything not allowed."""
    expected = sorted(command.patterns)
    unknown = sorted(set(values) - set(command.patterns))
    missing = sorted(set(command.patterns) - set(values))
    if unknown or missing:
        raise ArgumentRefused(
            f"{command.name}: takes args {expected or 'none'}"
            + (f"; unknown: {unknown}" if unknown else "")
            + (f"; missing: {missing}" if missing else ""),
            param="args",
            allowed=expected,
        )
    checked: dict[str, str] = {}
    for name, value in values.items():
        pattern = command.patterns[name]
        if not isinstance(value, str):
            raise ArgumentRefused(f"{command.name}: args.{name} must be text", param=name)
        shown = value if len(value) <= 60 else value[:57] + "..."
        if len(value) > MAX_VALUE_CHARS:
            raise ArgumentRefused(f"{command.name}: args.{name} is longer than {MAX_VALUE_CHARS}", param=name)
        if _CONTROL.search(value):
            raise ArgumentRefused(
                f"{command.name}: args.{name} {shown!r} contains a control character (newline, NUL …)",
                param=name,
            )
        if pattern.fullmatch(value) is None:
            raise ArgumentRefused(
                f"{command.name}: args.{name} {shown!r} does not match the pattern {pattern.pattern}",
                param=name,
                pattern=pattern.pattern,
            )
        if _leaves(value):
            # A value names a place relative to the command's folder (inside the roots): an absolute
            # path, ~ or a .. step would reach outside, whatever the pattern lets through.
            raise ArgumentRefused(
                f"{command.name}: args.{name} {shown!r} is a path outside the command's folder "
                "(absolute, ~ or ..): give a path inside it",
                param=name,
            )
        checked[name] = value
    argv = [command.program]
    for template in command.args:
        whole = _PLACEHOLDER.fullmatch(template)
        if whole is not None:
            name = whole.group(1)
            value = checked[name]
            if value.startswith("-") and name not in command.options:
                raise ArgumentRefused(
                    f"{command.name}: args.{name} may not start with '-' (it would be read as an option)",
                    param=name,
                )
            argv.append(value)
        else:
            built = _TOKEN.sub(
                lambda token: checked[token.group(1)] if token.group(1) else token.group(0)[0], template
            )
            first = _PLACEHOLDER.match(template)
            if built.startswith("-") and first is not None and first.group(1) not in command.options:
                # "{name}.txt" filled with "--help=x" is an option too: the rule is the argument's, not
                # only a whole placeholder's.
                raise ArgumentRefused(
                    f"{command.name}: args.{first.group(1)} may not make an argument start with '-' "
                    "(it would be read as an option)",
                    param=first.group(1),
                )
            argv.append(built)
    return argv


def _leaves(value: str) -> bool:
    """True for a value that, read as a path, leaves the folder it is relative to."""
    text = value.replace("\\", "/")
    return text.startswith(("/", "~")) or ".." in text.split("/") or re.match(r"^[A-Za-z]:", text) is not None


def unavailable(home: Path) -> str | None:
    """``available`` check of ``shell.run``: why no foreground command can run here, else None."""
    return _why_not(home, background=False)


def unavailable_background(home: Path) -> str | None:
    """``available`` check of ``shell.start``."""
    return _why_not(home, background=True)


def _why_not(home: Path, *, background: bool | None) -> str | None:
    try:
        commands = load_commands(home)
    except ConfigError as exc:
        return f"the shell commands are misconfigured: {exc.message}"
    if not commands:
        return "no shell command is allow-listed: add [[shell.commands]] to settings.toml"
    if background is not None and not any(c.background == background for c in commands.values()):
        kind = "background (background = true)" if background else "foreground"
        return f"no {kind} shell command is allow-listed"
    return None


def unavailable_any(home: Path) -> str | None:
    """``available`` check of ``shell.list``."""
    return _why_not(home, background=None)
