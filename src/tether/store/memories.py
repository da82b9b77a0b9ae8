"""Dialogue memory: what was said in earlier threads, and what an agent learned about the person, found
again by its words (seed 001 §4.2).

Two kinds of memory, per agent and per installation (two homes on one database never read each other's):

- ``turn``: one finished turn of a thread — the person's message and the answer — kept when the turn
  ends (never from a private thread, nor for an agent whose memory is off);
- ``fact``: a sentence an agent recorded with ``memory.remember`` ("prefers PDF reports"), which the
  person sees, searches and forgets (``tether memory``).

Search is lexical, with no download: the terms of ``store/terms.py`` (Chinese as overlapping character
pairs, Latin words lightly stemmed) indexed by SQLite's FTS5 (ranked by BM25) or PostgreSQL's
``tsvector`` with a GIN index (ranked by ``ts_rank``). A search reads the index, never the whole history,
and on SQLite its work is bounded whatever the history: a term kept in more than ``COMMON`` memories
(read from the index's vocabulary) is left out of the match when a rarer one is asked too (BM25 gives
it almost no weight anyway), and a question made only of common terms looks among the ``RECENT`` newest
memories (``python -m bench memory`` measures quality and cost at 1,000 and 100,000 turns).
Forgetting deletes the row and its index entry in one transaction: it is gone from search at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from tether.errors import ConfigError
from tether.store import terms as words
from tether.store.database import Database

TURN, FACT = "turn", "fact"
KINDS = (TURN, FACT)
MAX_FACT_CHARS = 500
MAX_TURN_CHARS = 4000  # what one remembered turn keeps of the message and the answer
COMMON = 500  # a term in more memories than this does not widen a search that has a rarer one
RECENT = 5_000  # where a question of common terms only looks: the newest memories
MOST_TERMS = 8  # the rarest terms asked that a search matches


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    memory_id: int
    agent: str
    kind: str
    text: str
    thread_id: str | None
    turn: int | None
    said_at: str  # when it was said (the turn's start, or when the fact was recorded)
    score: float = 0.0  # higher is better (only for a search's hits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.memory_id, "agent": self.agent, "kind": self.kind, "text": self.text,
            "thread_id": self.thread_id, "turn": self.turn, "said_at": self.said_at,
            "score": round(self.score, 4),
        }  # fmt: skip


BEFORE_CHARS = 160  # of what was said in the turn before, kept with a turn


def shown_turn(message: str, answer: str, before: str = "") -> str:
    """A remembered turn as it is found and shown: what came just before (in brackets), the person's
    message, and the answer."""
    lead = " ".join(before.split())[:BEFORE_CHARS]
    return (f"[{lead}]\n" if lead else "") + f"{message.strip()}\n→ {answer.strip()}"[:MAX_TURN_CHARS]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


_COLUMNS = "m.id, m.agent, m.kind, m.text, m.thread_id, m.turn, m.said_at"

_INSERT = text(
    "INSERT INTO memories (installation, agent, kind, thread_id, turn, said_at, text, terms, created_at) "
    "VALUES (:installation, :agent, :kind, :thread_id, :turn, :said_at, :text, :terms, :created_at)"
)
_SQLITE_INDEX = text("INSERT INTO memory_terms (rowid, terms) VALUES (:id, :terms)")
_SQLITE_UNINDEX = text("DELETE FROM memory_terms WHERE rowid = :id")
_PG_INDEX = text("UPDATE memories SET tsv = to_tsvector('simple', :terms) WHERE id = :id")

_SQLITE_SEARCH = text(
    f"SELECT {_COLUMNS}, -bm25(memory_terms) AS score FROM memory_terms "
    "JOIN memories m ON m.id = memory_terms.rowid "
    "WHERE memory_terms MATCH :match AND memory_terms.rowid > :after "
    "AND m.installation = :installation AND m.agent = :agent "
    "AND m.kind IN (:k1, :k2) AND (m.thread_id IS NULL OR m.thread_id <> :exclude) "
    "ORDER BY score DESC, m.id DESC LIMIT :limit"
)
_PG_SEARCH = text(
    f"SELECT {_COLUMNS}, ts_rank(m.tsv, q) AS score FROM memories m, "
    "websearch_to_tsquery('simple', :match) q "
    "WHERE m.tsv @@ q AND m.installation = :installation AND m.agent = :agent "
    "AND m.kind IN (:k1, :k2) AND (m.thread_id IS NULL OR m.thread_id <> :exclude) "
    "ORDER BY score DESC, m.id DESC LIMIT :limit"
)


class MemoryStore:
    """The memories of one installation's agents, in its database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.installation = db.installation.id
        self.postgres = db.dialect == "postgresql"

    # -- keeping ----------------------------------------------------------------------------------

    def keep_turn(
        self, agent: str, thread_id: str, turn: int, said_at: str, message: str, answer: str, before: str = ""
    ) -> bool:
        """Keep one finished turn (once: a second call for the same turn changes nothing). ``before`` is
        what the person said in the turn before it: "Keep how many?" is about the dumps asked about
        just before, and is found, and understood, with it."""
        shown = shown_turn(message, answer, before)
        with self.db.write() as conn:
            known = conn.execute(
                text("SELECT 1 FROM memories WHERE thread_id = :t AND turn = :n AND kind = 'turn'"),
                {"t": thread_id, "n": turn},
            ).first()
            if known is not None:
                return False
            self._insert(conn, agent, TURN, shown, thread_id, turn, said_at)
        return True

    def keep_many(
        self, turns: Iterable[tuple[str, str, int, str, str, str] | tuple[str, str, int, str, str, str, str]]
    ) -> int:
        """Keep many finished turns in one transaction — (agent, thread, turn, said at, message, answer
        [, what was said before]) each — skipping those kept already (what had been said before memory
        was on, for instance)."""
        kept = 0
        with self.db.write() as conn:
            known = {
                (str(t), int(n))
                for t, n in conn.execute(
                    text("SELECT thread_id, turn FROM memories WHERE kind = 'turn' AND installation = :i"),
                    {"i": self.installation},
                )
            }
            for agent, thread_id, turn, said_at, message, answer, *before in turns:
                if (thread_id, turn) in known:
                    continue
                known.add((thread_id, turn))
                shown = shown_turn(message, answer, before[0] if before else "")
                self._insert(conn, agent, TURN, shown, thread_id, turn, said_at)
                kept += 1
        return kept

    def remember(self, agent: str, fact: str, thread_id: str | None = None) -> Memory:
        """Record a fact an agent learned about the person."""
        fact = " ".join((fact or "").split())
        if not fact:
            raise ConfigError("a fact to remember: one sentence about the person, not empty")
        if len(fact) > MAX_FACT_CHARS:
            raise ConfigError(f"a fact is at most {MAX_FACT_CHARS} characters; this one is {len(fact)}")
        at = _now()
        with self.db.write() as conn:
            memory_id = self._insert(conn, agent, FACT, fact, thread_id, None, at)
        return Memory(
            memory_id=memory_id, agent=agent, kind=FACT, text=fact, thread_id=thread_id, turn=None, said_at=at
        )

    def _insert(
        self,
        conn: Any,
        agent: str,
        kind: str,
        shown: str,
        thread_id: str | None,
        turn: int | None,
        said_at: str,
    ) -> int:
        terms = words.indexed(shown)
        values = {
            "installation": self.installation, "agent": agent, "kind": kind, "thread_id": thread_id,
            "turn": turn, "said_at": said_at, "text": shown, "terms": terms, "created_at": _now(),
        }  # fmt: skip
        if self.postgres:
            memory_id = int(conn.execute(text(f"{_INSERT.text} RETURNING id"), values).scalar_one())
            conn.execute(_PG_INDEX, {"id": memory_id, "terms": terms})
        else:
            memory_id = int(conn.execute(_INSERT, values).lastrowid)
            conn.execute(_SQLITE_INDEX, {"id": memory_id, "terms": terms})
        return memory_id

    # -- finding ----------------------------------------------------------------------------------

    def search(
        self,
        agent: str,
        question: str,
        *,
        limit: int = 5,
        exclude_thread: str | None = None,
        kinds: tuple[str, ...] = KINDS,
    ) -> list[Memory]:
        """The memories of ``agent`` that ``question`` is most about, best first (none when it asks
        about nothing but itself)."""
        asked = words.asked(question)
        if not asked or limit <= 0:
            return []
        params = {
            "installation": self.installation, "agent": agent, "exclude": exclude_thread or "",
            "k1": kinds[0], "k2": kinds[-1], "limit": min(limit, 100),
        }  # fmt: skip
        with self.db.read() as conn:
            if self.postgres:
                params["match"] = " OR ".join(asked)
                rows = conn.execute(_PG_SEARCH, params).all()
            else:
                chosen, params["after"] = self._bounded(conn, asked)
                if not chosen:
                    return []
                params["match"] = " OR ".join(f'"{term}"' for term in chosen)
                rows = conn.execute(_SQLITE_SEARCH, params).all()
        return [_memory(row) for row in rows]

    @staticmethod
    def _bounded(conn: Any, asked: list[str]) -> tuple[list[str], int]:
        """The terms to match and the rowid to look after, so that a search reads at most about
        ``COMMON`` entries for each of at most ``MOST_TERMS`` terms: the rarest terms asked (those in the
        index at all), else the three least common among the ``RECENT`` newest memories."""
        marks = ", ".join(f":t{i}" for i in range(len(asked)))
        counts = {
            str(term): int(doc)
            for term, doc in conn.execute(
                text(f"SELECT term, doc FROM memory_vocab WHERE term IN ({marks})"),
                {f"t{i}": term for i, term in enumerate(asked)},
            )
        }
        rare = sorted((t for t in asked if 0 < counts.get(t, 0) <= COMMON), key=lambda t: counts[t])
        if rare:
            return rare[:MOST_TERMS], 0
        common = sorted((term for term in asked if counts.get(term)), key=lambda term: counts[term])[:3]
        newest = int(conn.execute(text("SELECT COALESCE(MAX(rowid), 0) FROM memory_terms")).scalar_one())
        return common, max(0, newest - RECENT)

    def some(self, agent: str, memory_ids: list[int]) -> dict[int, Memory]:
        """The memories of ``agent`` with these ids that still exist."""
        if not memory_ids:
            return {}
        marks = ", ".join(f":i{n}" for n in range(len(memory_ids)))
        query = text(
            f"SELECT {_COLUMNS} FROM memories m WHERE m.installation = :installation AND m.agent = :agent "
            f"AND m.id IN ({marks})"
        )
        values = {
            "installation": self.installation,
            "agent": agent,
            **{f"i{n}": i for n, i in enumerate(memory_ids)},
        }
        with self.db.read() as conn:
            return {m.memory_id: m for m in map(_memory, conn.execute(query, values))}

    def turn_id(self, thread_id: str, turn: int) -> int | None:
        """The id of the memory of a kept turn."""
        with self.db.read() as conn:
            found = conn.execute(
                text("SELECT id FROM memories WHERE installation = :i AND thread_id = :t AND turn = :n "
                     "AND kind = 'turn'"),
                {"i": self.installation, "t": thread_id, "n": turn},
            ).scalar()  # fmt: skip
        return int(found) if found is not None else None

    def facts(self, agent: str | None = None, limit: int = 200) -> list[Memory]:
        where = "m.installation = :installation AND m.kind = 'fact'" + (
            " AND m.agent = :agent" if agent else ""
        )
        query = text(f"SELECT {_COLUMNS} FROM memories m WHERE {where} ORDER BY m.id DESC LIMIT :limit")
        with self.db.read() as conn:
            rows = conn.execute(
                query, {"installation": self.installation, "agent": agent, "limit": limit}
            ).all()
        return [_memory(row) for row in rows]

    def count(self, agent: str | None = None) -> dict[str, int]:
        where = "installation = :installation" + (" AND agent = :agent" if agent else "")
        query = text(f"SELECT kind, COUNT(*) FROM memories WHERE {where} GROUP BY kind")
        with self.db.read() as conn:
            found = {
                str(k): int(n)
                for k, n in conn.execute(query, {"installation": self.installation, "agent": agent})
            }
        return {kind: found.get(kind, 0) for kind in KINDS}

    # -- forgetting -------------------------------------------------------------------------------

    def forget(self, memory_id: int) -> bool:
        """Forget one memory (a fact, or a turn): gone from search at once."""
        return self._forget("id = :v", memory_id) > 0

    def forget_thread(self, thread_id: str) -> int:
        """Forget every memory of a thread (it was deleted, or marked private): how many."""
        return self._forget("thread_id = :v", thread_id)

    def _forget(self, where: str, value: Any) -> int:
        with self.db.write() as conn:
            ids = [
                int(i)
                for i in conn.execute(
                    text(f"SELECT id FROM memories WHERE installation = :installation AND {where}"),
                    {"installation": self.installation, "v": value},
                ).scalars()
            ]
            for memory_id in ids:
                if not self.postgres:
                    conn.execute(_SQLITE_UNINDEX, {"id": memory_id})
                conn.execute(text("DELETE FROM memory_vectors WHERE memory_id = :id"), {"id": memory_id})
                conn.execute(text("DELETE FROM memories WHERE id = :id"), {"id": memory_id})
        return len(ids)


def _memory(row: Any) -> Memory:
    m = row._mapping
    return Memory(
        memory_id=int(m["id"]), agent=str(m["agent"]), kind=str(m["kind"]), text=str(m["text"]),
        thread_id=m["thread_id"], turn=m["turn"], said_at=str(m["said_at"]),
        score=float(m["score"]) if "score" in m else 0.0,
    )  # fmt: skip


def note_fact(
    runtime_threads: Any, agents: Any, memories: MemoryStore, fact: str, thread_id: str | None
) -> str:
    """``memory.remember`` for the agent of ``thread_id``: the fact noted, or ``ConfigError`` saying why
    not (no conversation, a private thread, an agent whose memory is off). What was noted, as said."""
    from tether.store.agents import DEFAULT_AGENT

    if thread_id is None:
        raise ConfigError("memory.remember notes what a conversation taught: it runs in a thread")
    state = runtime_threads.load(thread_id)
    if state is None:
        raise ConfigError(f"no thread {thread_id!r}")
    if state.private:
        raise ConfigError("this thread is private: nothing from it is remembered")
    agent = state.agent or DEFAULT_AGENT
    record = agents.get(agent)
    if record is not None and record.memory == "off":
        raise ConfigError(f"agent {agent!r} keeps no memory (memory = off): nothing was noted")
    return memories.remember(agent, fact, thread_id).text


def make_private(threads: Any, memories: MemoryStore, thread_id: str, private: bool) -> bool:
    """Mark a thread private (what it said is forgotten, and nothing more is kept) or not; False if there
    is no such thread."""
    if not threads.set_private(thread_id, private):
        return False
    if private:
        memories.forget_thread(thread_id)
    return True
