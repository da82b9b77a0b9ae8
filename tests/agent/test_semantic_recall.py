"""The semantic side of memory (``tether[semantic]``: WordLlama, weights inside its wheel): vectors kept
with remembered turns, found by meaning, fused with the lexical search; forgotten with their memory;
off when the setting says so; never a download."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tether.agent.embedder import load
from tether.agent.recall import Semantic, keep_vector, recall, semantic_for
from tether.config import AgentSettings
from tether.execution.executor import Executor
from tether.runtime import Runtime

pytest.importorskip("wordllama")
AT = "2026-11-01T10:00:00+00:00"


def test_the_embedder_loads_from_its_wheel_with_downloads_forbidden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = load("on")
    assert embedder is not None and load("off") is None
    vectors = embedder.embed(["the nightly copy of my photos", "backup of pictures every night"])
    assert vectors.shape == (2, 256) and float(vectors[0] @ vectors[1]) > 0.5


def test_a_paraphrase_with_no_shared_word_is_recalled_by_meaning_and_forgotten_with_its_memory(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mechanism, with a bar this small model clears for this pair (how good it is, the bench says)."""
    import tether.agent.recall as recall_module

    monkeypatch.setattr(recall_module, "MIN_SIMILARITY", 0.15)
    with Runtime.open(home) as runtime:
        memories = runtime.memories
        semantic = semantic_for(runtime, "on")
        assert isinstance(semantic, Semantic)
        memories.keep_turn(
            "assistant", "pics", 1, AT, "copy my pictures to the NAS every night", "Nightly at 03:30."
        )
        memories.keep_turn("assistant", "food", 1, AT, "I like spicy noodles", "Noted.")
        for thread in ("pics", "food"):
            keep_vector(memories, semantic, "assistant", thread, 1)
        asked = "when does the photo backup happen?"
        assert memories.search("assistant", asked) == []  # not one word in common
        found = recall(memories, "assistant", asked, "new", top_k=3, max_chars=2000, semantic=semantic)
        assert [m.thread_id for m in found] == ["pics"]
        assert recall(memories, "assistant", asked, "new", top_k=3, max_chars=2000) == ()  # lexical only
        memories.forget_thread("pics")
        again = recall(memories, "assistant", asked, "new", top_k=3, max_chars=2000, semantic=semantic)
        assert again == ()  # the process still holds its vector, never the memory


def test_a_session_keeps_a_vector_with_each_turn_only_when_semantic_recall_is_on(
    make_executor: Callable[..., Executor],
) -> None:
    from tether.agent.session import ConversationSession
    from tether.models.offline import OfflineModel
    from tether.toolkits.standard import registry as standard

    executor = make_executor(standard)
    runtime = executor.runtime
    on = AgentSettings(recall_semantic="on")
    ConversationSession(executor, OfflineModel(), settings=on).send_sync("on-1", "查看游戏状态")
    ConversationSession(executor, OfflineModel()).send_sync("off-1", "查看游戏状态")  # off: the default
    with runtime.db.read() as conn:
        from sqlalchemy import text

        kept = conn.execute(
            text("SELECT m.thread_id FROM memory_vectors v JOIN memories m ON m.id = v.memory_id")
        ).all()
    assert [r[0] for r in kept] == ["on-1"]
