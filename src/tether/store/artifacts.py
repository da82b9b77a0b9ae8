"""Generated files on record: which execution made them, for which thread (or run) and step, how big.

A task that generates files (``documents.generate``) writes them under ``<home>/artifacts/<execution id>/``
and names them in its result's ``data["artifacts"]``. They go on record in the same transaction that
records the job as completed (``record_artifacts``), so a file is listed exactly once, whatever process
saw the job end. Per conversation thread and format only the newest is offered (a run keeps every file
it made): the older one is marked superseded in that transaction, and ``store/artifact_files.py`` deletes
superseded files afterwards (a file is never deleted inside a transaction that may roll back) and checks
a path on record again before it is served.

A file is in the home of the installation whose job made it, and its record says so (installation and
host): each installation sweeps and forgets only its own records, so it never drops the record of a file
it cannot delete (another home's, perhaps on another host).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any, Protocol

from sqlalchemy import delete, insert, select, update

from tether.events import ArtifactCreated
from tether.store import schema
from tether.store.database import Database
from tether.store.events import append_event
from tether.tasks.result import TaskResult

A = schema.artifacts
log = logging.getLogger("tether.store")

ARTIFACTS_DIR = "artifacts"
FORMATS = ("md", "html", "pptx", "pdf")
MAX_PER_RESULT = 16
NAME_RE = re.compile(r"^[^/\\\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]{1,200}$")


def now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True, slots=True, kw_only=True)
class Artifact:
    artifact_id: int
    origin: str | None
    thread_id: str | None
    step_id: str | None
    execution_id: str
    format: str
    name: str
    path: str  # relative to the home, POSIX
    size: int
    created_at: str
    superseded_at: str | None = None
    installation: str | None = None  # the home its file is in
    host: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> Artifact:
        return cls(**dict(row._mapping))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def thread_of(origin: str | None) -> str | None:
    return origin.removeprefix("thread:") if origin and origin.startswith("thread:") else None


def _items(result: TaskResult) -> list[dict[str, Any]]:
    """The artifacts a completed result names, each checked: a known format, a file in the execution's
    own folder. Anything else is left off the record (and logged): a handler cannot point at other files."""
    raw = result.data.get("artifacts")
    if not isinstance(raw, list):
        return []
    items = []
    for item in raw[:MAX_PER_RESULT]:
        if not isinstance(item, dict):
            continue
        fmt, path, size = item.get("format"), item.get("path"), item.get("size")
        parts: tuple[str, ...] = PurePosixPath(path).parts if isinstance(path, str) else ()
        ok = (
            fmt in FORMATS
            and isinstance(size, int)
            and size >= 0
            and len(parts) == 3
            and parts[:2] == (ARTIFACTS_DIR, result.execution_id)
            and NAME_RE.match(parts[-1]) is not None
            and parts[-1] not in (".", "..")
        )
        if not ok:
            log.warning("%s: artifact %r left off the record", result.execution_id, item)
            continue
        # The name offered for download is a plain file name: the handler's, if it is one, else the file's.
        name = item.get("name")
        fallback = str(PurePosixPath(str(path)).name)
        plain = isinstance(name, str) and NAME_RE.match(name) is not None and name not in (".", "..")
        items.append({"format": fmt, "path": path, "size": size, "name": name if plain else fallback})
    return items


def record_artifacts(
    conn: Any, result: TaskResult, origin: str | None, step_id: str | None, owner: dict[str, Any]
) -> int:
    """Put the files of a completed ``result`` on record in the caller's write transaction, as files of
    ``owner`` (the job's installation and host). In a conversation, the thread's previous file of the
    same format is superseded (a thread offers its latest handout, not every draft); a run or a lone job
    keeps every file it made. How many."""
    items = _items(result)
    stamp = now()
    for item in items:
        # A goal run's agent task talks in a thread of its own ("run-<execution id>"): its files are the
        # run's, and a run keeps every document it made.
        if origin is not None and origin.startswith("thread:") and not origin.startswith("thread:run-"):
            conn.execute(
                update(A)
                .where(A.c.origin == origin, A.c.format == item["format"], A.c.superseded_at.is_(None))
                .values(superseded_at=stamp)
            )
        row = {
            "origin": origin,
            "thread_id": thread_of(origin),
            "step_id": step_id,
            "execution_id": result.execution_id,
            "format": item["format"],
            "name": item["name"][:200],
            "path": item["path"],
            "size": item["size"],
            "created_at": stamp,
            "installation": owner.get("installation"),
            "host": owner.get("host"),
        }
        artifact_id = int(conn.execute(insert(A), row).inserted_primary_key[0])
        append_event(
            conn,
            ArtifactCreated(
                topic=origin or f"job:{result.execution_id}",
                artifact_id=artifact_id,
                execution_id=result.execution_id,
                format=item["format"],
                name=row["name"],
                size=item["size"],
                step_id=step_id,
            ),
        )
    return len(items)


class ArtifactStore(Protocol):
    def list(
        self,
        *,
        thread_id: str | None = None,
        origin: str | None = None,
        execution_id: str | None = None,
        include_superseded: bool = False,
        limit: int = 100,
    ) -> list[Artifact]: ...
    def get(self, artifact_id: int) -> Artifact | None: ...
    def superseded(self, limit: int = 500) -> list[Artifact]: ...
    def forget(self, artifact_ids: Sequence[int]) -> int: ...


class SqlArtifactStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.installation = db.installation

    def list(
        self,
        *,
        thread_id: str | None = None,
        origin: str | None = None,
        execution_id: str | None = None,
        include_superseded: bool = False,
        limit: int = 100,
    ) -> list[Artifact]:
        """Newest first; superseded files (a thread's older ones) only with ``include_superseded``."""
        query = select(A)
        if thread_id is not None:
            query = query.where(A.c.thread_id == thread_id)
        if origin is not None:
            query = query.where(A.c.origin == origin)
        if execution_id is not None:
            query = query.where(A.c.execution_id == execution_id)
        if not include_superseded:
            query = query.where(A.c.superseded_at.is_(None))
        query = query.order_by(A.c.artifact_id.desc()).limit(max(1, min(limit, 1000)))
        with self.db.read() as conn:
            return [Artifact.from_row(row) for row in conn.execute(query)]

    def get(self, artifact_id: int) -> Artifact | None:
        with self.db.read() as conn:
            row = conn.execute(select(A).where(A.c.artifact_id == artifact_id)).first()
        return None if row is None else Artifact.from_row(row)

    def superseded(self, limit: int = 500) -> list[Artifact]:
        """This installation's superseded files (their files are in its home)."""
        mine = A.c.installation == self.installation.id
        query = select(A).where(A.c.superseded_at.is_not(None), mine).order_by(A.c.artifact_id).limit(limit)
        with self.db.read() as conn:
            return [Artifact.from_row(row) for row in conn.execute(query)]

    def forget(self, artifact_ids: Sequence[int]) -> int:
        """Delete the records of this installation's files among ``artifact_ids``; another's stay on
        record until that installation removes its file."""
        if not artifact_ids:
            return 0
        mine = A.c.installation == self.installation.id
        with self.db.write() as conn:
            result = conn.execute(delete(A).where(A.c.artifact_id.in_(list(artifact_ids)), mine))
        return int(result.rowcount or 0)
