"""An agent remembers earlier threads: a question about what was said is answered from the thread that
said it, cited; nothing is kept from a private thread, by an agent whose memory is off, or in an
ephemeral session; a model that reads prompts gets the memories with their sources."""

from __future__ import annotations

from collections.abc import Callable

from tether.agent.session import ConversationSession
from tether.config import AgentSettings
from tether.execution.executor import Executor
from tether.models.offline import OfflineModel
from tether.store.agents import AgentRecord
from tether.testing import ScriptedModel, say
from tether.toolkits.standard import registry as standard


def test_a_question_about_an_earlier_thread_is_answered_from_it_and_cites_it(
    make_executor: Callable[..., Executor],
) -> None:
    executor = make_executor(standard)
    session = ConversationSession(executor, OfflineModel())
    first = session.send_sync("farm-1", "启动游戏，然后刷 3 次金币副本")
    assert first.status.value == "completed", first.final
    asked = session.send_sync("new-1", "上次我们说的那个副本叫什么？")
    assert asked.status.value == "completed"
    assert "farm-1" in asked.final and "藏珍之蕾" in asked.final, asked.final  # the thread, and the name
    assert [s.kind for s in asked.steps if s.kind == "tool"] == []  # answered, nothing ran
    # In English too, and a question about something never said gets no made-up answer.
    session.send_sync("boss-1", "note that my manager is called Priya Raman")
    english = session.send_sync("new-2", "what did I say my manager's name was?")
    assert "boss-1" in english.final and "Priya Raman" in english.final, english.final
    unknown = session.send_sync("new-3", "what did I say my dentist's name was?")
    assert "found no earlier conversation" in unknown.final, unknown.final
    # A turn is kept with what the person said just before it, in its thread.
    session.send_sync("farm-1", "再看看游戏状态")
    kept = [m for m in executor.runtime.memories.search("assistant", "游戏状态", limit=20) if m.turn == 2]
    assert kept and kept[0].text.startswith("[启动游戏，然后刷 3 次金币副本]\n再看看游戏状态"), kept


def test_nothing_is_kept_from_a_private_thread_an_agent_without_memory_or_an_ephemeral_session(
    make_executor: Callable[..., Executor],
) -> None:
    executor = make_executor(standard)
    memories = executor.runtime.memories
    session = ConversationSession(executor, OfflineModel())
    session.send_sync("open-1", "查看游戏状态")
    assert memories.count()["turn"] == 1
    session.send_sync("secret-1", "查看游戏状态")
    executor.runtime.threads.set_private("secret-1", True)
    memories.forget_thread("secret-1")  # (what marking a thread private does: ``conversations``)
    session.send_sync("secret-1", "查看游戏状态")
    assert memories.count()["turn"] == 1 and all(
        m.thread_id != "secret-1" for m in memories.search("assistant", "游戏状态 查看", limit=20)
    )
    executor.runtime.agents.create(AgentRecord(name="quiet", grants=("automation",), memory="off"))
    from tether.agent.roster import agent_of, session_for, team_of

    team = team_of(executor, lambda name: OfflineModel())
    session_for(team, agent_of(team, "quiet")).send_sync("quiet-1", "查看游戏状态")
    assert memories.count("quiet")["turn"] == 0
    ephemeral = ConversationSession(executor, OfflineModel(), settings=AgentSettings(memory="ephemeral"))
    ephemeral.send_sync("eph-1", "查看游戏状态")
    assert memories.count()["turn"] == 1


def test_a_model_reads_the_memories_with_their_sources_and_a_budget(
    make_executor: Callable[..., Executor],
) -> None:
    executor = make_executor(standard)
    memories = executor.runtime.memories
    memories.keep_turn("assistant", "trip-1", 1, "2026-10-02T09:00:00+00:00",
                       "I fly to Chengdu on the 14th to see my parents", "Have a good trip!")  # fmt: skip
    memories.keep_turn("assistant", "other", 1, "2026-10-03T09:00:00+00:00", "the weather is fine", "yes")
    model = ScriptedModel([say("You fly on the 14th (thread trip-1).")])
    ConversationSession(executor, model).send_sync("ask-1", "when do I fly to Chengdu?")
    notes = [m["content"] for m in model.requests[0][0] if m["role"] == "system"]
    note = next(n for n in notes if "earlier conversations" in n)
    assert "2026-10-02 · thread trip-1" in note and "Chengdu" in note and "weather" not in note
    tight = ScriptedModel([say("ok")])
    settings = AgentSettings(recall_max_chars=20)
    ConversationSession(executor, tight, settings=settings).send_sync("ask-2", "when do I fly to Chengdu?")
    note = next(m["content"] for m in tight.requests[0][0] if "earlier conversations" in str(m["content"]))
    assert len(note.split("\n", 1)[1]) <= 20 + len("- [2026-10-02 · thread trip-1] ")
    off = ScriptedModel([say("ok")])
    ConversationSession(executor, off, settings=AgentSettings(recall_top_k=0)).send_sync(
        "ask-3", "when do I fly?"
    )
    assert not any("earlier conversations" in str(m["content"]) for m in off.requests[0][0])


def test_an_agent_notes_facts_only_when_granted_and_never_in_a_private_thread(
    make_executor: Callable[..., Executor],
) -> None:
    from tether.agent.roster import agent_of, session_for, team_of
    from tether.tasks.grants import Grants

    executor = make_executor(standard)
    team = team_of(executor, lambda name: OfflineModel())
    # Not granted (the built-in assistant as shipped): no such tool, and the executor knows no such task.
    plain = session_for(team, agent_of(team, None))
    assert "memory__remember" not in [t.name for t in plain.surface.tools]
    refused = executor.execute_sync("memory.remember", {"fact": "x"}, caller="agent", grants=Grants.of(["*"]))
    assert refused.status.value == "not_found"
    # Granted by name (the `memory` bundle): the offline model notes what it is asked to, in both languages.
    executor.runtime.agents.edit("assistant", grants=["all", "memory"])
    session = session_for(team, agent_of(team, None))
    assert session.send_sync("f-1", "记住：我的经理叫王芳").final == "好的，记下了：我的经理叫王芳"
    assert (
        session.send_sync("f-2", "remember that I prefer PDF reports").final == "Noted: I prefer PDF reports"
    )
    facts = executor.runtime.memories.facts("assistant")
    assert [(f.text, f.thread_id) for f in facts] == [
        ("I prefer PDF reports", "f-2"),
        ("我的经理叫王芳", "f-1"),
    ]
    assert "王芳" in session.send_sync("f-3", "我上次说我的经理叫什么？").final
    # On record like any task, once per step: the same execution id does not note it twice.
    noted = [r for r in executor.store.list() if r.task_id == "memory.remember"]
    assert len(noted) == 2 and all(r.status.value == "completed" and r.origin for r in noted)
    again = executor.execute_sync(
        "memory.remember", {"fact": "I prefer PDF reports"}, caller="agent", grants=Grants.of(["memory"]),
        origin="thread:f-2", execution_id=noted[0].execution_id,
    )  # fmt: skip
    assert again.status.value == "completed" and len(executor.runtime.memories.facts("assistant")) == 2
    # A private thread notes nothing; an agent whose memory is off notes nothing; nor does a call with
    # no conversation behind it.
    executor.runtime.threads.set_private("f-2", True)
    assert session.send_sync("f-2", "remember that I like tea").final.startswith(
        "Not noted: this thread is private"
    )
    executor.runtime.agents.edit("assistant", memory="off")
    quiet = session_for(team, agent_of(team, None))
    assert "keeps no memory" in quiet.send_sync("f-4", "记住：我喜欢喝茶").final
    bare = executor.execute_sync(
        "memory.remember", {"fact": "x"}, caller="agent", grants=Grants.of(["memory"])
    )
    assert bare.status.value == "rejected" and "runs in a thread" in bare.message
    assert len(executor.runtime.memories.facts("assistant")) == 2


def test_a_delegation_is_remembered_in_the_thread_the_person_talked_in(
    make_executor: Callable[..., Executor],
) -> None:
    from tether.agent.roster import agent_of, session_for, team_of

    executor = make_executor(standard)
    executor.runtime.agents.create(AgentRecord(name="lead", grants=("team", "automation")))
    executor.runtime.agents.create(AgentRecord(name="looker", grants=("automation",), aliases=("看守助手",)))
    team = team_of(executor, lambda name: OfflineModel())
    done = session_for(team, agent_of(team, "lead")).send_sync("lead-1", "让看守助手查看游戏状态")
    assert done.status.value == "completed"
    memories = executor.runtime.memories
    assert memories.count("lead")["turn"] == 1 and memories.count("looker")["turn"] == 0
    assert memories.count() == {"turn": 1, "fact": 0}  # no memory under a bundle's or a child's name
