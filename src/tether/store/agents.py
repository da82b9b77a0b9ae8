"""Named agents: the team a person runs (seed 001's Manager → Assistant → Dialogue).

An agent is a record every process of the database sees: its name, what it is for, its persona (read
by its model after tether's own instructions), its model (``provider/model``, a model name under the
home's provider, or ``offline``; none = the home's ``[model]``), its language, its tool grants
(``tasks/grants.py``: task ids, patterns and bundle names, checked when written), whether it keeps
memory, and the channel its notices go to. The default agent, ``assistant``, is built in: it is today's
assistant (every task exposed to agents, the home's model) and is not stored unless a person changes it.

Every value is checked here, with an error that names what is allowed: the CLI, the API and the page
all write through ``AgentStore``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update

from tether.errors import ConfigError
from tether.store import schema
from tether.store.database import Database
from tether.tasks.grants import Grants, expand

A = schema.agents
AGENT_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
DEFAULT_AGENT = "assistant"
LANGUAGES = ("auto", "zh", "en")
MEMORY = ("on", "off")
MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,199}$")
MAX_PERSONA = 20_000
MAX_DESCRIPTION = 500

_BY_NAME = select(A).where(A.c.name == bindparam("k_name"))
_ALL = select(A).order_by(A.c.name)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRecord:
    name: str
    description: str = ""
    persona: str = ""
    model: str | None = None  # None: the home's [model]
    language: str | None = None  # None: the home's [agent].language
    grants: tuple[str, ...] = ("all",)  # as the person wrote them (bundles kept by name)
    aliases: tuple[str, ...] = ()  # what people call it ("研究助手", "researcher"), for delegation
    memory: str = "on"
    channel: str | None = None
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    builtin: bool = False

    @property
    def effective_grants(self) -> Grants:
        return Grants.of(self.grants)

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> AgentRecord:
        """The record ``to_dict`` wrote (a turn's recorded view of its agent)."""
        return cls(
            name=str(value["name"]),
            description=str(value.get("description") or ""),
            persona=str(value.get("persona") or ""),
            model=value.get("model"),
            language=value.get("language"),
            grants=tuple(value.get("grants") or ()),
            aliases=tuple(value.get("aliases") or ()),
            memory=str(value.get("memory") or "on"),
            channel=value.get("channel"),
            created_at=str(value.get("created_at") or ""),
            updated_at=str(value.get("updated_at") or ""),
            builtin=bool(value.get("builtin")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "persona": self.persona,
            "model": self.model,
            "language": self.language,
            "grants": list(self.grants),
            "tasks": list(expand(self.grants)),
            "aliases": list(self.aliases),
            "memory": self.memory,
            "channel": self.channel,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "builtin": self.builtin,
        }


BUILTIN = AgentRecord(
    name=DEFAULT_AGENT,
    description="the default assistant: every task exposed to agents, the home's model",
    grants=("all",),
    created_at="",
    updated_at="",
    builtin=True,
)

FIELDS = ("description", "persona", "model", "language", "grants", "aliases", "memory", "channel")


def checked(record: AgentRecord) -> AgentRecord:
    """``record`` with its values checked and normalized; ``ConfigError`` names what is allowed."""
    if not isinstance(record.name, str) or not AGENT_NAME_RE.match(record.name):
        raise ConfigError(
            f"agent name {record.name!r}: use 1-40 lowercase letters, digits, '-' or '_', starting "
            "with a letter (e.g. research, docs-writer)"
        )
    if len(record.description) > MAX_DESCRIPTION:
        raise ConfigError(f"an agent's description is at most {MAX_DESCRIPTION} characters")
    if len(record.persona) > MAX_PERSONA:
        raise ConfigError(f"an agent's persona is at most {MAX_PERSONA} characters")
    model = record.model.strip() if isinstance(record.model, str) else None
    if model and not MODEL_RE.match(model):
        raise ConfigError(
            f"model {record.model!r}: name a model (deepseek-chat), a provider and model "
            "(deepseek/deepseek-chat), or offline"
        )
    language = record.language or None
    if language is not None and language not in LANGUAGES:
        raise ConfigError(f"language {language!r}: use one of {', '.join(LANGUAGES)}")
    if record.memory not in MEMORY:
        raise ConfigError(f"memory {record.memory!r}: use on or off")
    grants = tuple(g.strip() for g in record.grants if isinstance(g, str) and g.strip())
    expand(grants)  # raises with the bundles and the pattern syntax
    aliases = tuple(dict.fromkeys(a.strip() for a in record.aliases if isinstance(a, str) and a.strip()))
    if len(aliases) > 20 or any(len(a) > 40 for a in aliases):
        raise ConfigError("an agent has at most 20 aliases of at most 40 characters each")
    channel = record.channel.strip() if isinstance(record.channel, str) and record.channel.strip() else None
    if channel is not None and len(channel) > 200:
        raise ConfigError("an agent's channel is at most 200 characters")
    return replace(
        record, model=model or None, language=language, grants=grants, aliases=aliases, channel=channel
    )


class AgentStore:
    """Agents in the database; the built-in default is answered when it is not stored."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, name: str) -> AgentRecord | None:
        with self.db.read() as conn:
            row = conn.execute(_BY_NAME, {"k_name": name}).first()
        if row is None:
            return BUILTIN if name == DEFAULT_AGENT else None
        return _record(row)

    def list(self) -> list[AgentRecord]:
        with self.db.read() as conn:
            found = [_record(row) for row in conn.execute(_ALL).all()]
        if not any(a.name == DEFAULT_AGENT for a in found):
            found.insert(0, BUILTIN)
        return found

    def create(self, record: AgentRecord) -> AgentRecord:
        record = checked(record)
        with self.db.write() as conn:
            if conn.execute(_BY_NAME, {"k_name": record.name}).first() is not None or (
                record.name == DEFAULT_AGENT
            ):
                raise ConfigError(
                    f"agent {record.name!r} exists already: change it with `tether agents edit {record.name}`"
                )
            conn.execute(insert(A), _values(record))
        return record

    def edit(self, name: str, **changes: Any) -> AgentRecord:
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            raise ConfigError(f"agents have no field {', '.join(unknown)}; fields: {', '.join(FIELDS)}")
        with self.db.write() as conn:
            row = conn.execute(_BY_NAME, {"k_name": name}).first()
            if row is None and name != DEFAULT_AGENT:
                raise ConfigError(f"no agent {name!r}: see `tether agents list`")
            current = BUILTIN if row is None else _record(row)
            changed = checked(replace(current, **changes, updated_at=_now(), builtin=False))
            if row is None:  # the default assistant, changed for the first time: now stored
                changed = replace(changed, created_at=changed.updated_at)
                conn.execute(insert(A), _values(changed))
            else:
                values = _values(changed)
                conn.execute(update(A).where(A.c.name == name).values(values))
        return changed

    def delete(self, name: str) -> bool:
        """Remove an agent (the default one goes back to its built-in form); whether one was stored."""
        with self.db.write() as conn:
            done = conn.execute(delete(A).where(A.c.name == name))
        return bool(done.rowcount)


def _values(record: AgentRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "description": record.description,
        "persona": record.persona,
        "model": record.model,
        "language": record.language,
        "grants": json.dumps(list(record.grants)),
        "aliases": json.dumps(list(record.aliases), ensure_ascii=False),
        "memory": record.memory,
        "channel": record.channel,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


def _record(row: Any) -> AgentRecord:
    m = row._mapping
    return AgentRecord(
        name=m["name"],
        description=m["description"],
        persona=m["persona"],
        model=m["model"],
        language=m["language"],
        grants=tuple(json.loads(m["grants"])),
        aliases=tuple(json.loads(m["aliases"])),
        memory=m["memory"],
        channel=m["channel"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )
