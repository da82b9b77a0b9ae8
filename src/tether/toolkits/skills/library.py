"""Finding, validating and reading skills (see the package docstring)."""

from __future__ import annotations

import logging
import re
import unicodedata
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


def parse(text: str, folder: Path, source: str) -> Skill:
    """A skill from the text of its SKILL.md; ``ConfigError`` says what is wrong with it."""
    where = f"{folder / SKILL_FILE}"
    match = FRONT_MATTER.match(text.replace("\r\n", "\n"))
    if match is None:
        raise ConfigError(f"{where}: starts with a '---' front matter block (name, description, when_to_use)")
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: the front matter is not valid YAML: {exc}") from None
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
    extras = tuple(
        sorted(
            p.name
            for p in folder.iterdir()
            if p.name != SKILL_FILE
            and p.suffix.lower() in RESOURCE_SUFFIXES
            and p.is_file()
            and not p.is_symlink()
        )
    )
    return Skill(
        name=name,
        description=_one_line(description),
        when_to_use=_one_line(when),
        body=body,
        folder=folder,
        source=source,
        resources=extras,
    )


def _one_line(text: str) -> str:
    """Text for the system prompt: one line, without control, format or bidirectional characters (an
    escape sequence or a right-to-left override could make it read as something else)."""
    kept = "".join(ch if unicodedata.category(ch)[0] not in "CZ" or ch == " " else " " for ch in text)
    return " ".join(kept.split())


class SkillLibrary:
    """The skills of one home: shipped ones, then the home's own (which win on a name clash).

    Broken skills are left out and kept in ``problems`` (path → why), for ``tether doctor`` and the log.
    """

    def __init__(self, home: Path | None, *, shipped: bool = True) -> None:
        self.home = home
        self.skills: dict[str, Skill] = {}
        self.problems: dict[str, str] = {}
        if shipped:
            self._scan(Path(str(resources.files("tether") / "skills")), "tether")
        if home is not None:
            self._scan(home / HOME_SKILLS, "home")

    def _scan(self, root: Path, source: str) -> None:
        try:
            folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for folder in folders:
            if len(self.skills) >= MAX_SKILLS:
                self.problems[str(root)] = f"more than {MAX_SKILLS} skills; the rest are left out"
                return
            path = folder / SKILL_FILE
            try:
                if path.is_symlink() or not path.is_file():
                    continue
                if path.stat().st_size > MAX_SKILL_BYTES:
                    raise ConfigError(f"{path}: larger than {MAX_SKILL_BYTES // 1024} KiB")
                skill = parse(path.read_text(encoding="utf-8"), folder, source)
            except (ConfigError, OSError, UnicodeDecodeError) as exc:
                reason = exc.message if isinstance(exc, ConfigError) else f"{path}: {exc}"
                self.problems[str(path)] = reason
                log.warning("skill left out: %s", reason)
                continue
            self.skills[skill.name] = skill

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
            return skill.body
        if resource not in skill.resources:
            raise KeyError(
                f"skill {name!r} has no resource {resource!r}; it has: {', '.join(skill.resources) or 'none'}"
            )
        path = skill.folder / resource
        if path.is_symlink() or path.stat().st_size > MAX_RESOURCE_BYTES:
            raise KeyError(f"resource {resource!r} of skill {name!r} cannot be read (a link, or over 64 KiB)")
        return path.read_text(encoding="utf-8", errors="replace")
