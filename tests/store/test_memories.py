"""Dialogue memory in the store, on SQLite and on PostgreSQL: turns and facts found again by their words
in Chinese and English, per agent and per installation, kept once, forgotten at once."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tether.errors import ConfigError
from tether.store import terms
from tether.store.database import Database
from tether.store.memories import MemoryStore

AT = "2026-11-01T10:00:00+00:00"


def _store(open_db: Callable[[], Database]) -> MemoryStore:
    return MemoryStore(open_db())


def test_turns_and_facts_are_found_by_their_words_in_both_languages(open_db: Callable[[], Database]) -> None:
    store = _store(open_db)
    store.keep_turn(
        "assistant", "t1", 1, AT, "帮我刷三次藏珍之蕾", "刷完了 3 次副本：拟造花萼（金）·藏珍之蕾"
    )
    store.keep_turn("assistant", "t2", 1, AT, "my manager is called Priya Raman", "Noted: Priya Raman.")
    store.keep_turn("assistant", "t3", 1, AT, "send the weekly reports as PDF files", "I will use PDF.")
    store.keep_turn("assistant", "t4", 1, AT, "今天天气不错", "是的")
    store.keep_turn("research", "t5", 1, AT, "副本 藏珍之蕾 in research's own memory", "ok")
    found = store.search("assistant", "上次我们说的那个副本叫什么？")
    assert [m.thread_id for m in found][:1] == ["t1"] and "藏珍之蕾" in found[0].text
    assert all(m.agent == "assistant" for m in found)  # another agent's memory is its own
    assert store.search("assistant", "what was my manager's name?")[0].thread_id == "t2"
    assert store.search("assistant", "which format for the weekly report?")[0].thread_id == "t3"  # stems
    assert all(m.thread_id != "t1" for m in store.search("assistant", "副本 藏珍之蕾", exclude_thread="t1"))
    assert store.search("assistant", "what did we say?") == []  # nothing asked about but itself


def test_a_turn_is_kept_once_and_forgetting_is_at_once(open_db: Callable[[], Database]) -> None:
    store = _store(open_db)
    assert store.keep_turn("assistant", "t1", 1, AT, "the backup runs at 02:30 on nas-01", "ok")
    assert not store.keep_turn("assistant", "t1", 1, AT, "the backup runs at 02:30 on nas-01", "ok")
    fact = store.remember("assistant", "prefers answers in Chinese", "t1")
    assert store.count("assistant") == {"turn": 1, "fact": 1}
    assert [m.memory_id for m in store.facts("assistant")] == [fact.memory_id]
    assert store.search("assistant", "which language does the person prefer for answers?")[0].kind == "fact"
    assert store.forget(fact.memory_id) and not store.forget(fact.memory_id)
    assert store.search("assistant", "which language does the person prefer for answers?") == []
    assert store.forget_thread("t1") == 1
    assert store.search("assistant", "when does the backup on nas-01 run?") == []
    assert store.count() == {"turn": 0, "fact": 0}


def test_a_fact_is_checked(open_db: Callable[[], Database]) -> None:
    store = _store(open_db)
    with pytest.raises(ConfigError, match="not empty"):
        store.remember("assistant", "   ")
    with pytest.raises(ConfigError, match="at most 500"):
        store.remember("assistant", "x" * 501)


def test_another_installation_never_reads_these_memories(
    open_db: Callable[[], Database], database_url: str
) -> None:
    store = _store(open_db)
    store.keep_turn("assistant", "t1", 1, AT, "the server room code is 4711", "noted")
    other = Database(database_url, installation="f" * 16)
    try:
        assert MemoryStore(other).search("assistant", "what is the server room code?") == []
        assert MemoryStore(other).count() == {"turn": 0, "fact": 0}
    finally:
        other.close()
    assert store.search("assistant", "what is the server room code?")[0].thread_id == "t1"


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
@example("\ufada")  # an unassigned code point inside a CJK block (hypothesis found it): no letter, no term
def test_any_question_is_searched_without_error(question: str) -> None:
    # The match expression is built from terms only (letters, digits, CJK): nothing a person types can
    # reach the query syntax of FTS5 or of websearch_to_tsquery.
    for term in terms.asked(question):
        assert term and all(ch.isalnum() for ch in term), term


def test_any_question_reaches_the_store_safely(open_db: Callable[[], Database]) -> None:
    store = _store(open_db)
    store.keep_turn("assistant", "t1", 1, AT, "AND OR NOT NEAR \"quoted\" * ^ col:x 'x' -- ; drop", "ok")
    for question in [
        '"',
        "AND",
        "NEAR(",
        "col:x",
        "*",
        "-- ; drop table memories",
        "' OR 1=1 --",
        "藏",
        "a b",
    ]:
        store.search("assistant", question)  # no error, whatever it finds


def test_a_search_reads_a_bounded_part_of_a_long_history(
    open_db: Callable[[], Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Common terms do not widen a search that has a rarer one; a question of common terms only looks
    among the newest memories (SQLite; PostgreSQL ranks every match)."""
    from tether.store import memories as module

    store = _store(open_db)
    monkeypatch.setattr(module, "COMMON", 3)
    monkeypatch.setattr(module, "RECENT", 4)
    for n in range(10):
        store.keep_turn("assistant", f"g{n}", 1, AT, f"the game status was checked, round {n}", "ok")
    store.keep_turn("assistant", "rare", 1, AT, "the game status mentions the crimson calyx", "ok")
    assert (
        store.search("assistant", "what about the crimson calyx and the game status?")[0].thread_id == "rare"
    )
    newest = {m.thread_id for m in store.search("assistant", "game status", limit=20)}
    if not store.postgres:
        assert newest <= {"g7", "g8", "g9", "rare"}, newest  # the newest four memories only
    else:
        assert len(newest) == 11


def test_a_turn_is_kept_with_what_was_said_just_before_it(open_db: Callable[[], Database]) -> None:
    """ "Keep how many?" → "the last 10" means nothing alone: it is about the dumps asked about just
    before, and is found — and shown to the model — with that."""
    store = _store(open_db)
    store.keep_turn("assistant", "t1", 1, AT, "dump the ledger database every night", "Nightly at 02:15.")
    store.keep_turn(
        "assistant", "t1", 2, AT, "Keep how many?", "The last 10.", "dump the ledger database every night"
    )
    store.keep_turn("assistant", "t2", 1, AT, "how many photos do we keep?", "All of them.")
    found = store.search("assistant", "how many ledger dumps do we keep?")
    assert (found[0].thread_id, found[0].turn) == ("t1", 2)
    assert found[0].text == "[dump the ledger database every night]\nKeep how many?\n→ The last 10."
    assert store.keep_many([("assistant", "t3", 2, AT, "保留几份？", "10 份", "每晚备份账本数据库")]) == 1
    assert store.search("assistant", "账本数据库保留几份")[0].thread_id == "t3"
