"""The allow-listed commands of one home, and the only argv each may be given.

``[[shell.commands]]`` in settings.toml (validated structurally by ``tether.config.ShellCommand``) is
loaded here once more with what needs the machine: ``program`` is resolved to an absolute, executable
file (a bare name through ``shutil.which`` on the worker's ``PATH``), ``cwd`` must be a folder inside
the workspace roots (links followed, and refused when they lead out). ``build_argv`` substitutes a
call's values into the fixed ``args``: every value must fully match its placeholder's regex, never
holds a control character, and a value that stands as a whole argument never starts with ``-``
unless the placeholder is listed in ``options``. There is no shell anywhere: the argv list goes to
``subprocess`` as is.

Paths: a value is relative to the command's folder. Textually it is never absolute, ``~`` or ``..``;
and every path a value makes — the value, the rest of its argument from it (``{dir}/{name}``), what
follows an ``=`` or a glued short option in it, and the argument from a folder its literal text names
(``sub/{name}``) — is resolved with links followed and must stay in the folder, must not lead into
the tether home (a folder such as ``~`` may hold it), and must not name a hard-linked file (another
of its names may be anywhere). The handler checks again from the folder's descriptor just before the
command starts, and starts it in that very folder; what remains is a link swapped into the folder
between that check and the program's own open of the path, which only something already writing in
the folder can do. A program that follows links by itself while it walks a folder (``grep -R``,
``find -L``, ``cp -L``) still follows them: allow-list its form that does not.

May import: ``tether.config``, ``tether.errors``, ``tether.toolkits.workspace.paths``.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.config import SHELL_PLACEHOLDER, SHELL_TOKEN, ShellCommand, ShellSettings
from tether.errors import ConfigError, TaskFailed
from tether.toolkits.workspace.paths import Located, PathRefused, Roots

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
    roots: Roots | None = None  # the workspace the folder lies in (None: a bare command, in tests)
    located: Located | None = None  # the folder, as the roots found it

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
        located = roots.locate(entry.cwd or ".", must_exist=True)
    except PathRefused as exc:
        raise ConfigError(f"{where}: cwd: {exc.message}") from exc
    cwd = located.path
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
        roots=roots,
        located=located,
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


def build_argv(command: Command, values: Mapping[str, object], *, folder: Path | None = None) -> list[str]:
    """``[program, *args]`` with the values put in; ``ArgumentRefused`` for anything not allowed.

    ``folder`` is where the command will run (its ``cwd`` unless the caller opened it and says where
    that folder is now): every path a value makes is resolved from there, links followed."""
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
        shown = _shown(value)
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
    confine = _Confinement(command, folder or command.cwd)
    for template in command.args:
        built, filled, prefix = _fill(template, checked)
        if filled:
            first = filled[0][1]
            if not prefix and built.startswith("-") and first not in command.options:
                # "{name}.txt" filled with "--help=x" is an option too: the rule is the argument's, not
                # only a whole placeholder's.
                makes = (
                    "start with '-'"
                    if _PLACEHOLDER.fullmatch(template)
                    else "make an argument start with '-'"
                )
                raise ArgumentRefused(
                    f"{command.name}: args.{first} may not {makes} (it would be read as an option)",
                    param=first,
                )
            confine.check(built, filled, prefix)
        argv.append(built)
    return argv


def _shown(value: str) -> str:
    return value if len(value) <= 60 else value[:57] + "..."


def _fill(template: str, checked: Mapping[str, str]) -> tuple[str, list[tuple[int, str]], str]:
    """``template`` with the values put in, where each value starts in it (with its placeholder's
    name), and the literal text before the first placeholder."""
    parts: list[str] = []
    filled: list[tuple[int, str]] = []
    at = 0
    length = 0
    prefix: str | None = None
    for token in _TOKEN.finditer(template):
        literal = template[at : token.start()]
        parts.append(literal)
        length += len(literal)
        at = token.end()
        name = token.group(1)
        if name is None:  # {{ or }}
            parts.append(token.group(0)[0])
            length += 1
            continue
        if prefix is None:
            prefix = "".join(parts)
        filled.append((length, name))
        parts.append(checked[name])
        length += len(checked[name])
    parts.append(template[at:])
    return "".join(parts), filled, prefix or ""


class _Confinement:
    """Where the paths a command's values make really lead, from the folder the command runs in."""

    def __init__(self, command: Command, folder: Path) -> None:
        self.command = command
        self.folder = os.path.realpath(folder)
        roots = command.roots
        # A folder that holds the tether home (a root such as ~) must not hand a program a path into
        # it. A folder inside the home (the default <home>/workspace) holds none of its state, and
        # every path that stays in the folder stays out of it.
        self.roots = roots if roots is not None and not _inside(self.folder, str(roots.home)) else None

    def check(self, built: str, filled: list[tuple[int, str]], prefix: str) -> None:
        """Refuse the argument ``built`` when a path it makes leads out of the folder (through a link, or
        through '..' that values make together), into the tether home, or names a hard-linked file.

        A program may read a path starting at any value (``{dir}/{name}``, ``--file={file}``, ``-o{f}``),
        or inside one (``--file=x`` given to an option placeholder, ``if=x``): each is resolved from the
        folder. When the literal text before the first value holds a folder
        (``sub/{name}``, ``--out=/data/{f}``), the value may not leave that folder either."""
        for start, name in filled:
            for text in _paths_in(built[start:]):
                self._within(text, self.folder, name)
        if "/" in prefix:
            path = prefix.rsplit("=", 1)[-1]
            base = os.path.realpath(os.path.join(self.folder, os.path.dirname(path)))
            self._within(built[len(prefix) - len(path) :], base, filled[0][1])

    def _within(self, text: str, base: str, name: str) -> None:
        """Refuse ``text`` (a path from the folder) unless it really leads to ``base`` or below."""
        command = self.command
        target = os.path.realpath(os.path.join(self.folder, text))
        if not _inside(target, base):
            raise ArgumentRefused(
                f"{command.name}: args.{name} makes the path {_shown(text)!r}, which leads outside the "
                "command's folder (through a symbolic link, or '..'): give a path inside it",
                param=name,
            )
        if self.roots is not None:
            why = self.roots.touches_home(Path(target))
            if why is not None:
                raise ArgumentRefused(
                    f"{command.name}: args.{name} {_shown(text)!r} is refused: {why}", param=name
                )
        try:
            info = os.stat(target)
        except (OSError, ValueError):
            return
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            # Another name of the same file may lie anywhere on the disk (as the workspace never reads).
            raise ArgumentRefused(
                f"{command.name}: args.{name} {_shown(text)!r} names a file with {info.st_nlink} hard links; "
                "another of its names may lie outside the command's folder",
                param=name,
            )


def _paths_in(text: str) -> list[str]:
    """The paths a program may read from ``text``: all of it, what follows each ``=`` (``--file=x``,
    ``if=x``, ``VAR=x``) and what follows a glued short option (``-ox``, when options are allowed)."""
    found = [text]
    at = text.find("=")
    while at >= 0:
        found.append(text[at + 1 :])
        at = text.find("=", at + 1)
    if len(text) > 2 and text[0] == "-" and text[1] != "-":
        found.append(text[2:])
    return found


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


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
