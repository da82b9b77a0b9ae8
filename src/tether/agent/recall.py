"""What an agent remembers of earlier conversations, brought into a turn (seed 001 §4.2).

When a turn begins on a request (not on a yes/no), the memories of its agent that the request is about
are read from the store (``store/memories.py``): at most ``[agent].recall_top_k`` (0: none), none from
this thread, within ``recall_max_chars`` together, and only those that share enough of what the request
is about (``MIN_COVERAGE`` of its terms: one shared pair of characters is not a memory). The model
reads them as one note after the conversation, each with its source (thread, date), told to use one
only when it answers and to say where it comes from.

When a turn ends completed, it is kept (the person's message and the answer): never from a private
thread, never for an agent whose memory is off, never by a session whose threads are ephemeral, and
not when it only asked about an earlier conversation (an echo of a memory is not a new one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.models.base import RecalledMemory
from tether.models.offline_memory import asks_about_before
from tether.store import terms as words

if TYPE_CHECKING:
    from tether.store.memories import Memory, MemoryStore

# A memory is recalled when it holds at least this share of the request's terms. Chosen on the tune half
# of ``bench/data/memory_eval.json`` (recall@3 / unrelated memories recalled per question): 0 → 0.62 /
# 2.24, 0.15 → 0.56 / 1.49, 0.25 → 0.43 / 1.03, 0.34 → 0.29 / 0.51. A paraphrase shares few words with
# its answer, and the model is told to use a memory only when it answers: recall is worth more here.
MIN_COVERAGE = 0.15


# With an embedding model installed (``agent/embedder.py``), a memory whose meaning is this close to the
# request's (cosine) is recalled too, whatever words it shares. WordLlama's similarities of right and
# wrong memories overlap widely (deciles 0.26–0.80 and 0.20–0.76 on the tune half), so the bar is high:
# recall@3 0.56 → 0.61 for 1.5 → 2.0 unrelated memories per question (0.45: 0.61 for 2.2). That is why
# ``[agent].recall_semantic`` is off unless turned on.
MIN_SIMILARITY = 0.7
FUSE_K = 60  # reciprocal-rank fusion of the lexical and the semantic order


@dataclass(frozen=True, slots=True)
class Semantic:
    """The semantic side of recall: the embedder and the store of vectors."""

    embedder: Any
    vectors: Any


def recall(
    memories: MemoryStore,
    agent: str,
    request: str,
    thread_id: str,
    *,
    top_k: int,
    max_chars: int,
    semantic: Semantic | None = None,
) -> tuple[RecalledMemory, ...]:
    """The memories ``request`` is about, best first, bounded by ``top_k`` and ``max_chars``."""
    if top_k <= 0 or max_chars <= 0:
        return ()
    asked = set(words.asked(request))
    if not asked:
        return ()
    found: list[RecalledMemory] = []
    used = 0
    for hit in found_for(memories, agent, request, thread_id, asked, top_k * 3, semantic):
        shown = hit.text if used + len(hit.text) <= max_chars else hit.text[: max(0, max_chars - used)]
        if not shown:
            break
        used += len(shown)
        found.append(RecalledMemory(thread_id=hit.thread_id, said_at=hit.said_at, text=shown, kind=hit.kind))
        if len(found) >= top_k:
            break
    return tuple(found)


def found_for(
    memories: MemoryStore,
    agent: str,
    request: str,
    thread_id: str,
    asked: set[str],
    limit: int,
    semantic: Semantic | None,
) -> list[Memory]:
    """The memories worth recalling, best first: those sharing enough words (``MIN_COVERAGE``) and,
    with an embedder, those close enough in meaning (``MIN_SIMILARITY``), fused by rank."""
    lexical = [
        hit
        for hit in memories.search(agent, request, limit=limit, exclude_thread=thread_id)
        if len(asked & set(words.terms(hit.text))) / len(asked) >= MIN_COVERAGE
    ]
    if semantic is None:
        return lexical
    query = semantic.embedder.embed([request])[0]
    near = [
        (i, s)
        for i, s in semantic.vectors.nearest(agent, semantic.embedder.name, query, limit)
        if s >= MIN_SIMILARITY
    ]
    known = memories.some(agent, [i for i, _ in near])
    close = [known[i] for i, _ in near if i in known and known[i].thread_id != thread_id]
    scores: dict[int, float] = {}
    by_id: dict[int, Memory] = {}
    for order in (lexical, close):
        for rank, hit in enumerate(order):
            scores[hit.memory_id] = scores.get(hit.memory_id, 0.0) + 1.0 / (FUSE_K + rank + 1)
            by_id[hit.memory_id] = hit
    return [by_id[i] for i in sorted(scores, key=lambda i: -scores[i])]


def semantic_for(runtime: Any, mode: str) -> Semantic | None:
    """The semantic side for ``runtime`` when an embedder is installed and ``mode`` is not off."""
    from tether.agent.embedder import load

    embedder = load(mode)
    return None if embedder is None else Semantic(embedder, runtime.vectors)


def keep_vector(
    memories: MemoryStore, semantic: Semantic | None, agent: str, thread_id: str, turn: int
) -> None:
    """Embed a turn just kept (when an embedder is installed)."""
    if semantic is None:
        return
    memory_id = memories.turn_id(thread_id, turn)
    if memory_id is None:
        return
    memory = memories.some(agent, [memory_id]).get(memory_id)
    if memory is not None:
        semantic.vectors.put(
            memory_id, agent, semantic.embedder.name, semantic.embedder.embed([memory.text])[0]
        )


def note(recalled: tuple[RecalledMemory, ...], language: str) -> str:
    """The note the model reads: the memories with their sources, and how to use them."""
    zh = language == "zh"
    head = (
        "之前的对话里可能相关的内容（只在它确实回答了请求时使用，并说明出处：线程和日期）："
        if zh
        else "From earlier conversations (use one only when it answers the request, and say where it "
        "comes from: its thread and date):"
    )
    lines = []
    for memory in recalled:
        where = f"thread {memory.thread_id}" if memory.thread_id else "noted"
        lines.append(f"- [{memory.said_at[:10]} · {where}] {memory.text}")
    return head + "\n" + "\n".join(lines)


def worth_keeping(message: str) -> bool:
    """Whether a finished turn is something to remember: not a question about what was said before."""
    return not asks_about_before(message)
