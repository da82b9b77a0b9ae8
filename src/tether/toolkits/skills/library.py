"""Finding, validating and reading skills (see the package docstring).

Skills are read only from real folders: ``<home>/skills`` and each skill folder in it are opened with
``O_NOFOLLOW`` from the home's descriptor, and ``SKILL.md`` and each resource from their folder's
descriptor the same way, so a link anywhere (a skill folder pointing outside the home, a linked
``SKILL.md`` or resource, a folder swapped for a link after the scan) fails the open instead of being
followed; a file must be a regular file with one link (a hard link's other name may be anywhere — a key,
another user's file) and is read through the descriptor it was checked on. Every refusal is kept in
``problems`` with the reason. (Windows has no ``dir_fd``: there the same checks are made on paths.)
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from tether.errors import ConfigError

log = logging.getLogger("tether.skills")

SKILL_FILE = "SKILL.md"
HOME_SKILLS = "skills"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
MAX_SKILL_BYTES = 64 * 1024  # a SKILL.md larger than this is refused: it would flood the model's context
MAX_RESOURCE_BYTES = 64 * 1024
MAX_DESCRIPTION_CHARS = 300
MAX_WHEN_CHARS = 300
MAX_SKILLS = 500
MAX_LISTING_CHARS = 12_000  # the skills' part of the system prompt, however many are installed
RESOURCE_SUFFIXES = (".md", ".txt", ".json", ".yaml", ".yml", ".csv")
FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)(.*)\Z", re.S)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_FD_WALK = os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd
_REAL_ONLY = "skills are read only from real folders inside the home"


class Unsafe(Exception):
    """A skill file or folder that is not read: a link, a hard link, not a regular file, too large."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Skill:
    name: str
    description: str
    when_to_use: str
    body: str
    folder: Path
    source: str  # "tether" (shipped) or "home"
    resources: tuple[str, ...] = ()

    def listing(self) -> str:
        """One line for the system prompt: name, description and when to use it."""
        when = f" Use when: {self.when_to_use}" if self.when_to_use else ""
        return f"- {self.name}: {self.description}{when}"


def parse(text: str, folder: Path, source: str, resources: tuple[str, ...] = ()) -> Skill:
    """A skill from the text of its SKILL.md; ``ConfigError`` says what is wrong with it."""
    where = f"{folder / SKILL_FILE}"
    match = FRONT_MATTER.match(text.replace("\r\n", "\n"))
    if match is None:
        raise ConfigError(f"{where}: starts with a '---' front matter block (name, description, when_to_use)")
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: the front matter is not valid YAML: {exc}") from exc
    if not isinstance(meta, dict):
        raise ConfigError(f"{where}: the front matter must be a mapping of name, description, when_to_use")
    unknown = sorted(set(map(str, meta)) - {"name", "description", "when_to_use", "language"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown front matter keys {unknown}; allowed: name, description, when_to_use, language"
        )
    name, description = meta.get("name"), meta.get("description")
    when = meta.get("when_to_use", "") or ""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(
            f"{where}: name must be lowercase letters, digits and '-' (at most 64), got {name!r}"
        )
    if name != folder.name:
        raise ConfigError(f"{where}: name {name!r} must match its folder {folder.name!r}")
    if not isinstance(description, str) or not description.strip():
        raise ConfigError(f"{where}: description is required (one sentence)")
    if len(description) > MAX_DESCRIPTION_CHARS or not isinstance(when, str) or len(when) > MAX_WHEN_CHARS:
        raise ConfigError(
            f"{where}: description and when_to_use are at most {MAX_DESCRIPTION_CHARS} characters each"
        )
    body = match.group(2).strip()
    if not body:
        raise ConfigError(f"{where}: the body (the instructions) is empty")
    return Skill(
        name=name,
        description=_one_line(description),
        when_to_use=_one_line(when),
        body=body,
        folder=folder,
        source=source,
        resources=tuple(sorted(resources)),
    )


def _one_line(text: str) -> str:
    """Text for the system prompt: one line, without control, format or bidirectional characters (an
    escape sequence or a right-to-left override could make it read as something else)."""
    kept = "".join(ch if unicodedata.category(ch)[0] not in "CZ" or ch == " " else " " for ch in text)
    return " ".join(kept.split())


_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _plain(text: str) -> str:
    """A body or resource for a model's prompt: its lines and tabs, without control characters (an
    escape sequence, a carriage return that hides a line, a bidirectional override that reorders one)."""
    return _CONTROLS.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


class SkillLibrary:
    """The skills of one home: shipped ones, then the home's own (which win on a name clash).

    Broken skills are left out and kept in ``problems`` (path → why), for ``tether doctor`` and the log.
    """

    def __init__(self, home: Path | None, *, shipped: bool = True) -> None:
        self.home = home
        self.skills: dict[str, Skill] = {}
        self.problems: dict[str, str] = {}
        if shipped:
            self._scan(_shipped_root(), "tether")
        if home is not None:
            self._scan(home / HOME_SKILLS, "home")

    def _scan(self, root: Path, source: str) -> None:
        try:
            with _skills_dir(root, source) as dfd:
                names = sorted(n for n in os.listdir(dfd if _FD_WALK else root) if not n.startswith("."))
                for name in names:
                    if len(self.skills) >= MAX_SKILLS:
                        self.problems[str(root)] = f"more than {MAX_SKILLS} skills; the rest are left out"
                        return
                    self._load(root, dfd, name, source)
        except FileNotFoundError:
            return
        except Unsafe as exc:
            self._problem(str(root), f"{root}: {exc}")
        except OSError as exc:
            self._problem(str(root), f"{root}: cannot be read ({exc.strerror or exc})")

    def _load(self, root: Path, dfd: int, name: str, source: str) -> None:
        folder = root / name
        shipped = source == "tether"
        try:
            info = _lstat(root, dfd, name)
            if stat.S_ISLNK(info.st_mode):
                raise Unsafe(f"a link: {_REAL_ONLY}")
            if not stat.S_ISDIR(info.st_mode):
                return  # a stray file beside the skills
            with _open_dir(root, dfd, name) as fd:
                try:
                    text = _read(folder, fd, SKILL_FILE, MAX_SKILL_BYTES, shipped=shipped)
                except FileNotFoundError:
                    return  # a folder without SKILL.md is not a skill
                skill = parse(text, folder, source, _resources(folder, fd, shipped))
        except Unsafe as exc:
            self._problem(str(folder), f"{folder}: {exc}")
            return
        except (ConfigError, OSError, UnicodeDecodeError) as exc:
            reason = exc.message if isinstance(exc, ConfigError) else f"{folder / SKILL_FILE}: {exc}"
            self._problem(str(folder / SKILL_FILE), reason)
            return
        self.skills[skill.name] = skill

    def _problem(self, where: str, reason: str) -> None:
        self.problems[where] = reason
        log.warning("skill left out: %s", reason)

    def names(self) -> list[str]:
        return sorted(self.skills)

    def get(self, name: str) -> Skill | None:
        return self.skills.get(name)

    def listing(self, limit: int = MAX_LISTING_CHARS) -> str:
        """Names and descriptions, one line each, at most ``limit`` characters (the rest by name only)."""
        lines: list[str] = []
        size = 0
        for number, name in enumerate(self.names()):
            line = self.skills[name].listing()
            if size + len(line) > limit:
                rest = self.names()[number:]
                lines.append(f"- and {len(rest)} more, by name: {', '.join(rest)}"[: max(0, limit - size)])
                break
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    def read(self, name: str, resource: str | None = None) -> str:
        """A skill's body, or one of its resources; ``KeyError`` names what exists."""
        skill = self.skills.get(name)
        if skill is None:
            raise KeyError(f"no skill {name!r}; installed: {', '.join(self.names()) or 'none'}")
        if resource is None:
            return _plain(skill.body)
        if resource not in skill.resources:
            raise KeyError(
                f"skill {name!r} has no resource {resource!r}; it has: {', '.join(skill.resources) or 'none'}"
            )
        root = skill.folder.parent
        try:
            with _skills_dir(root, skill.source) as dfd, _open_dir(root, dfd, skill.folder.name) as fd:
                return _plain(
                    _read(
                        skill.folder,
                        fd,
                        resource,
                        MAX_RESOURCE_BYTES,
                        shipped=skill.source == "tether",
                        errors="replace",
                    )
                )
        except (Unsafe, OSError) as exc:
            why = str(exc) if isinstance(exc, Unsafe) else _why(exc)
            raise KeyError(f"resource {resource!r} of skill {name!r} cannot be read: {why}") from exc


def _shipped_root() -> Path:
    return Path(str(resources.files("tether") / "skills"))


def _why(exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
        return "it, or its folder, became a link (skills are read only from real folders)"
    return exc.strerror or str(exc)


@contextlib.contextmanager
def _skills_dir(root: Path, source: str) -> Iterator[int]:
    """A descriptor of a skills folder: the shipped one as installed, ``<home>/skills`` only when it
    is a real folder (not a link to somewhere else)."""
    if not _FD_WALK:
        if source != "tether" and root.is_symlink():
            raise Unsafe(f"a link: {_REAL_ONLY}")
        yield -1
        return
    if source == "tether":
        fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    else:
        home = os.open(root.parent, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            with _open_dir(root.parent, home, root.name) as fd:
                yield fd
                return
        finally:
            os.close(home)
    try:
        yield fd
    finally:
        os.close(fd)


def _lstat(root: Path, dfd: int, name: str) -> os.stat_result:
    if not _FD_WALK:
        return os.lstat(root / name)
    return os.stat(name, dir_fd=dfd, follow_symlinks=False)


@contextlib.contextmanager
def _open_dir(root: Path, dfd: int, name: str) -> Iterator[int]:
    """``name`` in ``dfd``, opened only if it is a real folder (``O_NOFOLLOW``: a link fails)."""
    if not _FD_WALK:
        if (root / name).is_symlink():
            raise Unsafe(f"a link: {_REAL_ONLY}")
        yield -1
        return
    try:
        fd = os.open(name, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
            raise Unsafe(f"not a real folder (a link, or a file): {_REAL_ONLY}") from exc
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _read(
    folder: Path, fd: int, name: str, limit: int, *, shipped: bool = False, errors: str = "strict"
) -> str:
    """The text of ``name`` in the folder ``fd``: a regular file with one link, at most ``limit``
    bytes, opened without following a link and checked on the descriptor it is read from. (Shipped
    files may have several links: package installers hard-link them from their cache.)"""
    if _FD_WALK:
        try:
            handle = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise Unsafe(f"{name} is a link: skill files are read only as real files") from exc
            raise
    else:
        if (folder / name).is_symlink():
            raise Unsafe(f"{name} is a link: skill files are read only as real files")
        handle = os.open(folder / name, os.O_RDONLY)
    with os.fdopen(handle, "rb") as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Unsafe(f"{name} is not a regular file")
        if info.st_nlink > 1 and not shipped:
            raise Unsafe(f"{name} is hard-linked (its other name may be anywhere): copy it instead")
        if info.st_size > limit:
            raise Unsafe(f"{name} is larger than {limit // 1024} KiB")
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise Unsafe(f"{name} is larger than {limit // 1024} KiB")
    return data.decode("utf-8", errors=errors)


def _resources(folder: Path, fd: int, shipped: bool) -> tuple[str, ...]:
    """The names of the folder's resources: text files of the allowed kinds, real files with one link
    (links and hard links are left out; reading checks again)."""
    found: list[str] = []
    for name in os.listdir(fd if _FD_WALK else folder):
        if name == SKILL_FILE or Path(name).suffix.lower() not in RESOURCE_SUFFIXES:
            continue
        try:
            info = _lstat(folder, fd, name)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and (info.st_nlink == 1 or shipped):
            found.append(name)
    return tuple(found)
