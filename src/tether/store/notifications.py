"""Notification channels and their outbox.

A channel is a name, the kind of address it has (``tgram``, ``mailto``, ``json``, ``dbus`` … — Apprise's
scheme) and the events it is sent; its address, which carries tokens and passwords, is in the keyring
(``credentials``), never here. The outbox holds one row per (channel, source): the same event queued by
two executors, or twice by one, is one notification. A sender claims a due row (compare-and-set to
``sending`` with a lease, so a sender that died mid-send leaves it to be claimed again), then marks it
``sent``, or due again later with the error (backoff), or ``failed`` after the last attempt.
The cursor keeps how far the event log has been read for notifications and signals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from tether.store.database import Database

EVENTS = ("approval", "review", "ended", "proactive")
PENDING, SENDING, SENT, FAILED = "pending", "sending", "sent", "failed"


def _at(seconds: float = 0.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat(timespec="microseconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class Channel:
    name: str
    scheme: str
    events: tuple[str, ...]
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scheme": self.scheme,
            "events": list(self.events),
            "created_at": self.created_at,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Notification:
    notification_id: int
    channel: str
    event: str
    source_key: str
    title: str
    body: str
    status: str
    attempts: int
    next_at: str
    error: str | None
    created_at: str
    sent_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.notification_id, "channel": self.channel, "event": self.event,
            "source": self.source_key, "title": self.title, "body": self.body, "status": self.status,
            "attempts": self.attempts, "next_at": self.next_at, "error": self.error,
            "created_at": self.created_at, "sent_at": self.sent_at,
        }  # fmt: skip


_N_COLUMNS = (
    "id, channel, event, source_key, title, body, status, attempts, next_at, error, created_at, sent_at"
)


def _notification(row: Any) -> Notification:
    m = row._mapping
    return Notification(
        notification_id=int(m["id"]), channel=m["channel"], event=m["event"], source_key=m["source_key"],
        title=m["title"], body=m["body"], status=m["status"], attempts=int(m["attempts"]),
        next_at=m["next_at"], error=m["error"], created_at=m["created_at"], sent_at=m["sent_at"],
    )  # fmt: skip


_ADD_CHANNEL = text(
    "INSERT INTO channels (installation, name, scheme, events, created_at) "
    "VALUES (:installation, :name, :scheme, :events, :at) ON CONFLICT (installation, name) "
    "DO UPDATE SET scheme = excluded.scheme, events = excluded.events"
)
_CHANNELS = text(
    "SELECT name, scheme, events, created_at FROM channels WHERE installation = :installation ORDER BY name"
)
_REMOVE_CHANNEL = text("DELETE FROM channels WHERE installation = :installation AND name = :name")
_QUEUE = text(
    "INSERT INTO notifications (installation, channel, event, source_key, title, body, status, attempts, "
    "next_at, created_at) VALUES (:installation, :channel, :event, :source_key, :title, :body, 'pending', "
    "0, :next_at, :at) ON CONFLICT (installation, channel, source_key) DO NOTHING"
)
_DUE = text(
    f"SELECT {_N_COLUMNS} FROM notifications WHERE installation = :installation AND "
    "((status = 'pending' AND next_at <= :now) OR (status = 'sending' AND next_at <= :now)) "
    "ORDER BY id LIMIT :limit"
)
_CLAIM = text(
    "UPDATE notifications SET status = 'sending', attempts = attempts + 1, next_at = :lease "
    "WHERE installation = :installation AND id = :id AND status = :status AND attempts = :attempts"
)
_SENT = text(
    "UPDATE notifications SET status = 'sent', sent_at = :at, error = NULL "
    "WHERE installation = :installation AND id = :id"
)
_RETRY = text(
    "UPDATE notifications SET status = :status, next_at = :next_at, error = :error "
    "WHERE installation = :installation AND id = :id"
)
_CURSOR = text("SELECT position FROM cursors WHERE installation = :installation AND name = :name")
_START_CURSOR = text(
    "INSERT INTO cursors (installation, name, position) VALUES (:installation, :name, :position) "
    "ON CONFLICT (installation, name) DO NOTHING"
)
_ADVANCE = text(
    "UPDATE cursors SET position = :position WHERE installation = :installation AND name = :name "
    "AND position < :position"
)


class NotificationStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.installation = db.installation.id

    # -- channels -------------------------------------------------------------------------------------

    def add_channel(self, name: str, scheme: str, events: tuple[str, ...]) -> None:
        with self.db.write() as conn:
            conn.execute(
                _ADD_CHANNEL,
                {"installation": self.installation, "name": name, "scheme": scheme,
                 "events": json.dumps(list(events)), "at": _at()},
            )  # fmt: skip

    def channels(self) -> list[Channel]:
        with self.db.read() as conn:
            rows = conn.execute(_CHANNELS, {"installation": self.installation}).all()
        return [
            Channel(name=r[0], scheme=r[1], events=tuple(json.loads(r[2])), created_at=r[3]) for r in rows
        ]

    def remove_channel(self, name: str) -> bool:
        with self.db.write() as conn:
            return (
                conn.execute(_REMOVE_CHANNEL, {"installation": self.installation, "name": name}).rowcount > 0
            )

    # -- the outbox -----------------------------------------------------------------------------------

    def queue(
        self, channel: str, event: str, source_key: str, title: str, body: str, *, delay_s: float = 0
    ) -> bool:
        """Queue a notification; False when this channel has it already (same source)."""
        with self.db.write() as conn:
            done = conn.execute(
                _QUEUE,
                {"installation": self.installation, "channel": channel, "event": event,
                 "source_key": source_key, "title": title[:300], "body": body[:4000],
                 "next_at": _at(delay_s), "at": _at()},
            )  # fmt: skip
            return done.rowcount > 0

    def due(self, limit: int = 20) -> list[Notification]:
        """Notifications whose time has come: pending ones, and those a sender claimed and never
        settled (its lease ran out: it died mid-send)."""
        with self.db.read() as conn:
            rows = conn.execute(_DUE, {"installation": self.installation, "now": _at(), "limit": limit}).all()
        return [_notification(r) for r in rows]

    def claim(self, item: Notification, lease_s: float) -> bool:
        """Take ``item`` to send it (one sender wins)."""
        with self.db.write() as conn:
            done = conn.execute(
                _CLAIM,
                {"installation": self.installation, "id": item.notification_id, "status": item.status,
                 "attempts": item.attempts, "lease": _at(lease_s)},
            )  # fmt: skip
            return done.rowcount > 0

    def sent(self, notification_id: int) -> None:
        with self.db.write() as conn:
            conn.execute(_SENT, {"installation": self.installation, "id": notification_id, "at": _at()})

    def retry(self, notification_id: int, error: str, *, after_s: float | None) -> None:
        """Due again ``after_s`` from now with ``error``; failed for good when ``after_s`` is None."""
        status = FAILED if after_s is None else PENDING
        with self.db.write() as conn:
            conn.execute(
                _RETRY,
                {"installation": self.installation, "id": notification_id, "status": status,
                 "next_at": _at(after_s or 0), "error": error[:500]},
            )  # fmt: skip

    def notifications(self, *, limit: int = 50, status: str | None = None) -> list[Notification]:
        where = "installation = :installation" + (" AND status = :status" if status else "")
        sql = text(f"SELECT {_N_COLUMNS} FROM notifications WHERE {where} ORDER BY id DESC LIMIT :limit")
        with self.db.read() as conn:
            rows = conn.execute(
                sql, {"installation": self.installation, "status": status, "limit": max(1, min(limit, 1000))}
            ).all()
        return [_notification(r) for r in rows]

    # -- how far the event log was read ----------------------------------------------------------------

    def cursor(self, name: str, start: int) -> int:
        """Where ``name`` has read the event log up to; set to ``start`` the first time (a read, and a
        write only then: every executor asks every second)."""
        with self.db.read() as conn:
            found = conn.execute(_CURSOR, {"installation": self.installation, "name": name}).scalar()
        if found is not None:
            return int(found)
        with self.db.write() as conn:
            conn.execute(_START_CURSOR, {"installation": self.installation, "name": name, "position": start})
            return int(conn.execute(_CURSOR, {"installation": self.installation, "name": name}).scalar_one())

    def advance(self, name: str, position: int) -> None:
        with self.db.write() as conn:
            conn.execute(_ADVANCE, {"installation": self.installation, "name": name, "position": position})
