import json
from pathlib import Path

from tether.agent import memory
from tether.agent.session import ConversationSession
from tether.config import AgentSettings
from tether.execution.executor import Executor
from tether.store.threads import MemoryThreadStore
from tether.testing import ScriptedModel, call, calls, say


def test_split_point_never_orphans_a_tool_result() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "tool_calls": [{"id": "1"}]},
        {"role": "tool", "tool_call_id": "1", "content": "{}"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "ok"},
    ]
    assert memory.split_point(messages, keep_last=4) == 4  # the tail starts at the person's message "b"


def test_summary_keeps_goals_preferences_agreements_and_open_questions_and_invents_nothing() -> None:
    messages = [
        {"role": "user", "content": "以后刷副本都默认刷 3 次"},
        {"role": "assistant", "content": "好的，记住了。"},
        {"role": "user", "content": "farm gold for the weekly event"},
        {"role": "tool", "content": json.dumps({"task_id": "demo.farm_instance", "status": "completed",
                                                "message": "farmed 藏珍之蕾 3 time(s)"})},
        {"role": "user", "content": "yes"},
        {"role": "assistant", "content": "Should I also salvage the 3-star relics?"},
    ]  # fmt: skip
    summary = memory.fold("", messages, 2000)
    assert "[preference] person: 以后刷副本都默认刷 3 次" in summary
    assert "[goal] person: farm gold for the weekly event" in summary
    assert "[agreement] person: yes" in summary
    assert "[result] demo.farm_instance completed: farmed 藏珍之蕾 3 time(s)" in summary
    assert "[open question] assistant: Should I also salvage the 3-star relics?" in summary
    said = " ".join(json.dumps(m, ensure_ascii=False) + " " + str(m.get("content")) for m in messages)
    for line in summary.splitlines():
        quoted = (
            line.split(": ", 1)[1]
            if line.startswith(("[goal]", "[preference]", "[agreement]", "[open"))
            else ""
        )
        assert not quoted or quoted in said  # every quote is something that was said


def test_preferences_outlive_old_goals_when_the_summary_shrinks() -> None:
    summary = memory.fold("", [{"role": "user", "content": "always answer in Chinese"}], 300)
    for i in range(50):
        summary = memory.fold(summary, [{"role": "user", "content": f"farm gold batch {i}"}], 300)
    assert "always answer in Chinese" in summary and len(summary) <= 300
    assert "batch 49" in summary and "batch 0 " not in summary


def test_compression_keeps_the_prompt_bounded_over_500_turns(running_game: Executor) -> None:
    turns = 500
    script = []
    for _ in range(turns):
        script += [calls(call("demo__status")), say("The game is running and all is well.")]
    settings = AgentSettings(keep_last_messages=8, compress_after_messages=16, compress_after_chars=6000,
                             summary_max_chars=1500)  # fmt: skip
    model = ScriptedModel(script)
    s = ConversationSession(running_game, model, settings=settings, threads=MemoryThreadStore())
    sizes = []
    for i in range(turns):
        s.send_sync("long", f"turn {i}: how is the game? remember I prefer short answers")
        sizes.append(s.prompt_chars("long"))
    model.assert_consumed()
    assert max(sizes[100:]) < 3 * max(sizes[:20])  # bounded, not growing with the conversation
    assert max(sizes) < 20_000
    state = s.threads.load("long")
    assert state is not None and state.folded > 0 and "prefer short answers" in state.summary


def test_settings_reject_unknown_choices(tmp_path: Path) -> None:
    import pytest

    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match="language"):
        AgentSettings(language="fr")  # type: ignore[arg-type]
    (tmp_path / "settings.toml").write_text('[agent]\nlanguage = "zh"\nmax_steps = 5\n')
    assert AgentSettings.load(tmp_path, {}).language == "zh"
    assert AgentSettings.load(tmp_path, {"TETHER_MAX_STEPS": "7"}).max_steps == 7
