"""Initiative's record: every signal an agent weighed, what it decided and why, the proactive message it
posted, and the person's rating of it — and each agent's threshold, which the ratings move.

A signal with a key (a schedule's tick, an event of the log) is decided once: a second ``record`` of the
same key — another executor, or a step replayed after a crash — returns the first decision unchanged.
A rating moves the agent's threshold: 👎 raises it by ``DOWN`` (the agent speaks first less often), 👍
lowers it by ``UP``, within ``LOWEST``–``HIGHEST``; rating a message again replaces the earlier rating's
move, so rating twice never counts twice. Staying silent is rarely wrong, so a 👎 moves further.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, text

from tether.errors import ConfigError, StoreError
from tether.store import fast
from tether.store.database import Database

DOWN, UP = 0.05, 0.02
LOWEST, HIGHEST = 0.3, 0.95
MAX_NOTE_CHARS = 200


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRecord:
    decision_id: int
    agent: str
    kind: str
    signal: dict[str, Any]
    fired: bool
    category: str
    score: float
    threshold: float
    reason: str
    decided_by: str
    thread_id: str | None
    turn: int | None
    message: str | None
    rating: int | None
    rating_note: str | None
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.decision_id, "agent": self.agent, "kind": self.kind, "signal": self.signal,
            "fired": self.fired, "category": self.category, "score": round(self.score, 3),
            "threshold": round(self.threshold, 3), "reason": self.reason, "decided_by": self.decided_by,
            "thread_id": self.thread_id, "turn": self.turn, "message": self.message,
            "rating": self.rating, "rating_note": self.rating_note, "created_at": self.created_at,
        }  # fmt: skip


_COLUMNS = (
    "id, agent, kind, signal, fired, category, score, threshold, reason, decided_by, thread_id, turn, "
    "message, rating, rating_note, created_at"
)
_VALUES = (
    "INSERT INTO decisions (installation, agent, signal_key, kind, signal, fired, category, score, "
    "threshold, reason, decided_by, created_at) VALUES (:installation, :agent, :signal_key, :kind, "
    ":signal, :fired, :category, :score, :threshold, :reason, :decided_by, :created_at)"
)
# One statement: the decision inserted and read back, or nothing when its key was decided already
# (SQLite 3.35 and PostgreSQL both say RETURNING; a NULL key never conflicts).
_INSERT = text(f"{_VALUES} ON CONFLICT (installation, signal_key) DO NOTHING RETURNING {_COLUMNS}")
_BY_KEY = text(f"SELECT {_COLUMNS} FROM decisions WHERE installation = :installation AND signal_key = :key")
_BY_KEYS = text(
    f"SELECT signal_key, {_COLUMNS} FROM decisions WHERE installation = :installation AND signal_key IN :keys"
).bindparams(bindparam("keys", expanding=True))
_BY_ID = text(f"SELECT {_COLUMNS} FROM decisions WHERE installation = :installation AND id = :id")
_BY_MESSAGE = text(
    f"SELECT {_COLUMNS} FROM decisions WHERE installation = :installation AND thread_id = :thread_id "
    "AND turn = :turn"
)
_ATTACH = text(
    "UPDATE decisions SET thread_id = :thread_id, turn = :turn, message = :message "
    "WHERE installation = :installation AND id = :id"
)
_POSTED_SINCE = text(
    "SELECT message FROM decisions WHERE installation = :installation AND agent = :agent "
    "AND message IS NOT NULL AND created_at >= :since ORDER BY id DESC LIMIT 50"
)
_THRESHOLD = text("SELECT threshold FROM thresholds WHERE installation = :installation AND agent = :agent")
_SET_THRESHOLD = text(
    "INSERT INTO thresholds (installation, agent, threshold, updated_at) "
    "VALUES (:installation, :agent, :threshold, :at) ON CONFLICT (installation, agent) "
    "DO UPDATE SET threshold = excluded.threshold, updated_at = excluded.updated_at"
)
_RATE = text(
    "UPDATE decisions SET rating = :rating, rating_note = :note, rated_at = :at "
    "WHERE installation = :installation AND id = :id"
)


def _record(row: Any) -> DecisionRecord:
    m = row._mapping
    return DecisionRecord(
        decision_id=int(m["id"]), agent=m["agent"], kind=m["kind"], signal=json.loads(m["signal"]),
        fired=bool(m["fired"]), category=m["category"], score=float(m["score"]),
        threshold=float(m["threshold"]), reason=m["reason"], decided_by=m["decided_by"],
        thread_id=m["thread_id"], turn=m["turn"], message=m["message"], rating=m["rating"],
        rating_note=m["rating_note"], created_at=m["created_at"],
    )  # fmt: skip


def _move(rating: int | None) -> float:
    return 0.0 if rating is None else (DOWN if rating < 0 else -UP)


class InitiativeStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.installation = db.installation.id

    def record(
        self,
        *,
        agent: str,
        signal_key: str | None,
        kind: str,
        signal: dict[str, Any],
        fired: bool,
        category: str,
        score: float,
        threshold: float,
        reason: str,
        decided_by: str,
    ) -> tuple[DecisionRecord, bool]:
        """Record a decision; for a signal decided before (same key), that decision and False."""
        values = {
            "installation": self.installation, "agent": agent, "signal_key": signal_key, "kind": kind,
            "signal": json.dumps(signal, ensure_ascii=False, default=str), "fired": int(fired),
            "category": category, "score": float(score), "threshold": float(threshold),
            "reason": reason[:1000], "decided_by": decided_by, "created_at": _now(),
        }  # fmt: skip
        with self.db.write() as conn:
            row = fast.first(conn, _INSERT, values)
            if row is not None:
                return _record(row), True
            found = fast.first(conn, _BY_KEY, {"installation": self.installation, "key": signal_key})
            if found is None:  # the insert met this key's row: it cannot be gone (decisions are kept)
                raise StoreError(f"the decision for {signal_key!r} was neither recorded nor found")
        return _record(found), False

    def attach(self, decision_id: int, thread_id: str | None, turn: int | None, message: str | None) -> None:
        """Link a decision to the proactive message it posted (turn ``turn`` of ``thread_id``; None while
        it is being posted, and all None when it could not be)."""
        with self.db.write() as conn:
            conn.execute(
                _ATTACH,
                {"installation": self.installation, "id": decision_id, "thread_id": thread_id,
                 "turn": turn, "message": message},
            )  # fmt: skip

    def get(self, decision_id: int) -> DecisionRecord | None:
        with self.db.read() as conn:
            row = conn.execute(_BY_ID, {"installation": self.installation, "id": decision_id}).first()
        return _record(row) if row is not None else None

    def by_key(self, signal_key: str) -> DecisionRecord | None:
        with self.db.read() as conn:
            row = conn.execute(_BY_KEY, {"installation": self.installation, "key": signal_key}).first()
        return _record(row) if row is not None else None

    def by_keys(self, signal_keys: list[str]) -> dict[str, DecisionRecord]:
        """The decisions of those of ``signal_keys`` decided already, by key, in one read."""
        if not signal_keys:
            return {}
        with self.db.read() as conn:
            rows = conn.execute(
                _BY_KEYS, {"installation": self.installation, "keys": sorted(set(signal_keys))}
            )
            return {row[0]: _record(row) for row in rows}

    def by_message(self, thread_id: str, turn: int) -> DecisionRecord | None:
        with self.db.read() as conn:
            row = conn.execute(
                _BY_MESSAGE, {"installation": self.installation, "thread_id": thread_id, "turn": turn}
            ).first()
        return _record(row) if row is not None else None

    def decisions(
        self, *, agent: str | None = None, fired: bool | None = None, limit: int = 50
    ) -> list[DecisionRecord]:
        """The newest decisions first, of one agent or all, fired or not or both."""
        where, params = ["installation = :installation"], dict[str, Any](installation=self.installation)
        if agent is not None:
            where.append("agent = :agent")
            params["agent"] = agent
        if fired is not None:
            where.append("fired = :fired")
            params["fired"] = int(fired)
        sql = text(
            f"SELECT {_COLUMNS} FROM decisions WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT :limit"
        )
        with self.db.read() as conn:
            return [_record(r) for r in conn.execute(sql, {**params, "limit": max(1, min(limit, 1000))})]

    def posted_since(self, agent: str, since: str) -> list[str]:
        """The proactive messages ``agent`` posted since ``since`` (ISO time), newest first."""
        with self.db.read() as conn:
            rows = conn.execute(
                _POSTED_SINCE, {"installation": self.installation, "agent": agent, "since": since}
            )
            return [r[0] for r in rows]

    def threshold(self, agent: str, default: float) -> float:
        with self.db.read() as conn:
            found = conn.execute(_THRESHOLD, {"installation": self.installation, "agent": agent}).scalar()
        return float(found) if found is not None else default

    def rate(
        self, decision_id: int, rating: int, note: str, *, default: float
    ) -> tuple[DecisionRecord, float]:
        """Rate a proactive message (+1 or -1, with a word); the decision and the agent's new threshold."""
        if rating not in (1, -1):
            raise ConfigError("a rating is up (+1, 👍) or down (-1, 👎)")
        note = " ".join((note or "").split())
        if len(note) > MAX_NOTE_CHARS:
            raise ConfigError(f"a rating's word is at most {MAX_NOTE_CHARS} characters; this is {len(note)}")
        with self.db.write() as conn:
            row = conn.execute(_BY_ID, {"installation": self.installation, "id": decision_id}).first()
            if row is None:
                raise ConfigError(f"no decision {decision_id}: `tether initiative list` shows them")
            before = _record(row)
            if before.message is None:
                raise ConfigError(f"decision {decision_id} posted no message: only a message is rated")
            found = conn.execute(
                _THRESHOLD, {"installation": self.installation, "agent": before.agent}
            ).scalar()
            current = float(found) if found is not None else default
            moved = min(HIGHEST, max(LOWEST, current + _move(rating) - _move(before.rating)))
            conn.execute(
                _SET_THRESHOLD,
                {"installation": self.installation, "agent": before.agent, "threshold": moved, "at": _now()},
            )
            conn.execute(
                _RATE,
                {"installation": self.installation, "id": decision_id, "rating": rating,
                 "note": note or None, "at": _now()},
            )  # fmt: skip
            after = _record(
                conn.execute(_BY_ID, {"installation": self.installation, "id": decision_id}).one()
            )
        return after, moved
