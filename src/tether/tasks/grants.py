"""Tool grants: which of the tasks exposed to a caller one agent may reach.

A task's ``exposed_to`` is the ceiling of what any caller may reach; an agent's grants select within it.
A grant is a task id (``documents.generate``), a pattern (``workspace.*``, ``web.read_*``, ``*``), or the
name of a bundle tether ships (``files``, ``research``, …: the seed's "tool clients"), which stands for its
patterns. A task the grants do not cover does not exist for that agent: the registry answers ``None``,
the executor ``not_found``, exactly like a task that was never registered.

Grants narrow and never widen: ``Grants.narrowed(other)`` keeps both sets of patterns as layers, and a
task is granted only when every layer covers it. That is how a sub-agent's effective grants are its own
∩ its delegator's without computing the intersection of two glob languages.

The two control tools are granted like tasks under their ids ``jobs.status`` and ``jobs.stop``. Two
tools reach beyond one task — ``agents.delegate`` (another agent) and ``skills.run`` (a whole run) — and
one keeps what the person said — ``memory.remember`` (a fact about them): these are granted only by
their own name or bundle, never by a wildcard such as ``*`` or ``skills.*``.
Plain constants and ``fnmatch``: no pydantic, so the worker's start path does not grow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from tether.errors import ConfigError

PATTERN_RE = re.compile(r"^(\*|[a-z][a-z0-9_]*(\.([a-z][a-z0-9_]*\*?|\*))*\*?)$")

# The ids the control tools are granted under (``agent/surface.py`` maps them to its tool names).
JOBS_STATUS = "jobs.status"
JOBS_STOP = "jobs.stop"
REMEMBER = "memory.remember"
DELEGATE = "agents.delegate"

# The bundles tether ships: named sets of patterns a person composes into an agent's grants.
BUNDLES: Mapping[str, tuple[str, ...]] = {
    "files": ("workspace.*",),
    "research": ("web.*", "workspace.read", "workspace.list", "workspace.find", "workspace.grep"),
    "documents": ("documents.*", "skills.*", "workspace.read", "workspace.list", "workspace.write"),
    "system": ("shell.*",),
    "automation": ("demo.*",),
    "jobs": (JOBS_STATUS, JOBS_STOP),
    "memory": (REMEMBER,),
    "team": (DELEGATE,),
    "all": ("*",),
}

BUNDLE_TEXT: Mapping[str, str] = {
    "files": "read, write, move, delete and search files in the workspace",
    "research": "search the web, read pages and summarize; read workspace files",
    "documents": "write documents and decks (md, html, pptx, pdf) with skills; read and write files",
    "system": "run allow-listed shell commands",
    "automation": "the demo game automation (farming, training, salvage)",
    "jobs": "check and stop the jobs it started",
    "memory": "note what it learned about the person (memory.remember)",
    "team": "hand work to other agents (agents.delegate)",
    "all": "every task exposed to agents",
}


def expand(entries: Iterable[str]) -> tuple[str, ...]:
    """The patterns of ``entries`` (bundle names expanded), validated; a ``ConfigError`` names the
    bundles and the pattern syntax when one is not understood."""
    out: list[str] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise ConfigError(f"a grant is a task id, a pattern or a bundle name, got {entry!r}")
        name = entry.strip()
        if name in BUNDLES:
            out.extend(BUNDLES[name])
        elif PATTERN_RE.match(name):
            out.append(name)
        else:
            raise ConfigError(
                f"grant {entry!r} is not understood: use a task id (documents.generate), a pattern "
                f"(workspace.*, web.read_*, *) or a bundle: {', '.join(BUNDLES)}"
            )
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True, slots=True)
class Grants:
    """Layers of patterns; a task is granted when every layer has a pattern that matches its id."""

    layers: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, entries: Iterable[str]) -> Grants:
        return cls((expand(entries),))

    def allows(self, task_id: str) -> bool:
        if not self.layers:
            return False  # no layer at all grants nothing (fail closed), like an empty one
        return all(any(_covers(pattern, task_id) for pattern in layer) for layer in self.layers)

    def narrowed(self, other: Grants | None) -> Grants:
        """These grants within ``other`` (a delegator's): never more than either."""
        if other is None:
            return self
        layers = [*self.layers]
        for layer in other.layers:
            if layer not in layers:
                layers.append(layer)
        return Grants(tuple(layers))

    def to_json(self) -> list[list[str]]:
        return [list(layer) for layer in self.layers]

    @classmethod
    def from_json(cls, value: Any) -> Grants | None:
        """Grants as ``to_json`` wrote them (None stays None: no narrowing); ``ConfigError`` otherwise."""
        if value is None:
            return None
        if not isinstance(value, Sequence) or isinstance(value, str):
            raise ConfigError(f"grants must be a list of pattern lists, got {type(value).__name__}")
        layers: list[tuple[str, ...]] = []
        for layer in value:
            if not isinstance(layer, Sequence) or isinstance(layer, str):
                raise ConfigError("grants must be a list of pattern lists")
            for pattern in layer:
                if not isinstance(pattern, str) or not PATTERN_RE.match(pattern):
                    raise ConfigError(f"grants: {pattern!r} is not a task id or pattern")
            layers.append(tuple(layer))
        return cls(tuple(layers))


# Tools that reach beyond one task (another agent, a whole run) or keep what the person said (a fact
# about them): granted only by their own name or bundle, never by a wildcard such as ``*`` or ``skills.*``
# — an agent notes facts about the person only when the person lets it.
BY_NAME_ONLY = frozenset({DELEGATE, "skills.run", REMEMBER})


def _covers(pattern: str, task_id: str) -> bool:
    if task_id in BY_NAME_ONLY:
        return pattern == task_id
    return fnmatchcase(task_id, pattern)


def allowed(task_id: str, grants: Grants | None) -> bool:
    """Whether ``grants`` reach ``task_id`` (None: no narrowing, except that a task granted only by
    name is reached only by grants that name it)."""
    if grants is None:
        return task_id not in BY_NAME_ONLY
    return grants.allows(task_id)
