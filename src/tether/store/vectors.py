"""The optional semantic side of dialogue memory: each remembered turn's embedding, found again by
meaning (``agent/embedder.py`` makes them; ``agent/recall.py`` fuses what this finds with the lexical
search of ``memories.py``).

Vectors are kept as float16 in the store, per installation, agent and model (a turn embedded by one
model is never compared with another's). A search compares the question with the ``RECENT`` newest
vectors of the agent, held in this process as one matrix and topped up with what was kept since: its
cost does not grow with the history past that bound. What it returns are memory ids; the caller reads
the memories themselves from the store, so a memory forgotten since (its vector goes with it) is never
recalled from a stale matrix.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import text

from tether.store.database import Database

RECENT = 20_000  # the newest vectors a search compares with

_PUT = text(
    "INSERT INTO memory_vectors (memory_id, installation, agent, model, vector) "
    "VALUES (:id, :installation, :agent, :model, :vector) ON CONFLICT (memory_id) DO NOTHING"
)
_NEWER = text(
    "SELECT memory_id, vector FROM memory_vectors WHERE installation = :installation AND agent = :agent "
    "AND model = :model AND memory_id > :after ORDER BY memory_id DESC LIMIT :limit"
)


class MemoryVectors:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.installation = db.installation.id
        self._lock = threading.Lock()
        # (agent, model) → (the largest id read, ids, the matrix of their vectors, float32, rows normalized)
        self._held: dict[tuple[str, str], tuple[int, Any, Any]] = {}

    def put(self, memory_id: int, agent: str, model: str, vector: Any) -> None:
        import numpy as np

        data = np.asarray(vector, dtype=np.float16).tobytes()
        with self.db.write() as conn:
            conn.execute(
                _PUT,
                {"id": memory_id, "installation": self.installation, "agent": agent, "model": model,
                 "vector": data},
            )  # fmt: skip

    def nearest(self, agent: str, model: str, query: Any, limit: int) -> list[tuple[int, float]]:
        """The ids of ``agent``'s memories nearest ``query`` (a normalized vector), with their cosine
        similarity, best first."""
        import numpy as np

        ids, matrix = self._matrix(agent, model, len(query))
        if not len(ids):
            return []
        scores = matrix @ np.asarray(query, dtype=np.float32)
        top = np.argsort(-scores)[: max(1, limit)]
        return [(int(ids[i]), float(scores[i])) for i in top]

    def _matrix(self, agent: str, model: str, dim: int) -> tuple[Any, Any]:
        import numpy as np

        with self._lock:
            after, ids, matrix = self._held.get(
                (agent, model), (0, np.zeros(0, np.int64), np.zeros((0, dim), np.float32))
            )
            with self.db.read() as conn:
                rows = conn.execute(
                    _NEWER,
                    {"installation": self.installation, "agent": agent, "model": model, "after": after,
                     "limit": RECENT},
                ).all()  # fmt: skip
            if rows:
                rows.reverse()  # oldest first, as the matrix is
                new_ids = np.asarray([int(r[0]) for r in rows], np.int64)
                new = np.stack([np.frombuffer(bytes(r[1]), np.float16).astype(np.float32) for r in rows])
                ids, matrix = (
                    np.concatenate([ids, new_ids])[-RECENT:],
                    np.concatenate([matrix, new])[-RECENT:],
                )
                self._held[(agent, model)] = (int(new_ids[-1]), ids, matrix)
            return ids, matrix
