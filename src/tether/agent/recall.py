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

from typing import TYPE_CHECKING

from tether.models.base import RecalledMemory
from tether.models.offline_memory import asks_about_before
from tether.store import terms as words

if TYPE_CHECKING:
    from tether.store.memories import MemoryStore

# A memory is recalled when it holds at least this share of the request's terms. Chosen on the tune half
# of ``bench/data/memory_eval.json`` (recall@3 / unrelated memories recalled per question): 0 → 0.62 /
# 2.24, 0.15 → 0.56 / 1.49, 0.25 → 0.43 / 1.03, 0.34 → 0.29 / 0.51. A paraphrase shares few words with
# its answer, and the model is told to use a memory only when it answers: recall is worth more here.
MIN_COVERAGE = 0.15


def recall(
    memories: MemoryStore, agent: str, request: str, thread_id: str, *, top_k: int, max_chars: int
) -> tuple[RecalledMemory, ...]:
    """The memories ``request`` is about, best first, bounded by ``top_k`` and ``max_chars``."""
    if top_k <= 0 or max_chars <= 0:
        return ()
    asked = set(words.asked(request))
    if not asked:
        return ()
    found: list[RecalledMemory] = []
    used = 0
    for hit in memories.search(agent, request, limit=top_k * 3, exclude_thread=thread_id):
        shared = asked & set(words.terms(hit.text))
        if len(shared) / len(asked) < MIN_COVERAGE:
            continue
        shown = hit.text if used + len(hit.text) <= max_chars else hit.text[: max(0, max_chars - used)]
        if not shown:
            break
        used += len(shown)
        found.append(RecalledMemory(thread_id=hit.thread_id, said_at=hit.said_at, text=shown, kind=hit.kind))
        if len(found) >= top_k:
            break
    return tuple(found)


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
