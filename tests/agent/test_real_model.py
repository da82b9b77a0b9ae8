"""Conversation turns of a real small model, replayed: ``tether run`` against llama.cpp's llama-server
serving Qwen2.5-Coder-1.5B-Instruct was recorded (``tests/support/recorder.py``; each session's ``how``
says what was run) and the server's answers are given again, in order, by a local HTTP server.

What such a model does that scripted models never did: it writes its calls as text (fenced, bare, one per
line, without the toolkit prefix, with no arguments key), uses aliases and made-up values, and ends with
template markup. Whatever it does, a turn's status and exit code say what happened, a call it wrote is
never shown as the answer, and nothing destructive runs without the person's own yes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_openai import FakeOpenAI
from tests.support.helpers import tether_cli
from tests.support.recorder import replay, same_questions
from tether.agent.surface import tool_for
from tether.models.textcalls import read
from tether.toolkits.demo import game
from tether.toolkits.demo.registry import registry as demo

SESSIONS = Path(__file__).parent / "sessions"
DEMO = ("--registry", "tether.toolkits.demo.registry:registry")
TOOLS = [tool_for(spec) for spec in demo if "agent" in spec.exposed_to]
EXIT = {"completed": 0, "failed": 1, "needs_confirmation": 3, "budget_exhausted": 1}
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _no_game_left(home: Path) -> Iterator[None]:
    yield
    with contextlib.suppress(ValueError, KeyError, OSError):
        os.kill(int(json.loads(game.info_path(home).read_text())["pid"]), signal.SIGKILL)


def converse(home: Path, server: FakeOpenAI, session: str, *messages: str) -> list[dict[str, Any]]:
    """The recorded turns again, on one thread: each turn's JSON document, checked for what every turn
    owes the person whatever the model did."""
    recorded = replay(server, SESSIONS / f"{session}.json")
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "llama-cpp"\nmodel = "qwen2.5-coder-1.5b"\nbase_url = "{server.url}"\n',
        encoding="utf-8",
    )
    turns = []
    for number, message in enumerate(messages):
        thread = ("--new-thread", "t1") if number == 0 else ("--thread", "t1")
        code, out, err = tether_cli(
            *DEMO, "run", message, *thread, "--json",
            home=home, TETHER_MODEL_STREAM="0", timeout=120,
        )  # fmt: skip
        turn = json.loads(out)
        assert code == EXIT[turn["status"]], (code, turn, err)  # the exit code says what happened
        said = read(turn["final"], TOOLS)
        assert not said.calls and not said.attempt, turn["final"]  # a call is never the answer
        turns.append(turn)
    assert same_questions(server.requests, recorded) == []
    return turns


def tools_run(turn: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["tool"], s["result"]["status"]) for s in turn["steps"] if s["kind"] == "tool"]


def test_a_start_written_as_a_fenced_block_runs(home: Path, fake_openai: FakeOpenAI) -> None:
    (turn,) = converse(home, fake_openai, "real_run_start", "启动游戏")
    assert turn["status"] == "completed" and tools_run(turn) == [("demo.start_game", "completed")]
    assert game.info_path(home).exists()


def test_a_farm_with_made_up_values_is_refused_and_the_turn_says_it_failed(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    (turn,) = converse(home, fake_openai, "real_run_farm_made_up", "刷 3 次金币副本")
    assert turn["status"] == "failed" and tools_run(turn) == [("demo.farm_instance", "rejected")]
    assert game.load_state(home)["farm_attempts_total"] == 0


@pytest.mark.parametrize(
    ("session", "message"),
    [("real_run_salvage_zh", "分解四星遗器"), ("real_run_salvage_en", "salvage my 4-star relics")],
)
def test_a_destructive_call_without_its_prefix_is_taken_and_never_runs_unasked(
    home: Path, fake_openai: FakeOpenAI, session: str, message: str
) -> None:
    """The model wrote ``{"name": "salvage_relics", …}``: once shown as the answer (raw JSON, exit 0)."""
    (turn,) = converse(home, fake_openai, session, message)
    assert tools_run(turn) == [("demo.salvage_relics", "rejected")]  # the game is off: refused, nobody asked
    assert turn["status"] == "failed" and "start" in turn["final"]


def test_a_call_with_no_arguments_key_is_taken_and_a_cautious_one_asks_first(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    (turn,) = converse(home, fake_openai, "real_run_exit", "exit the game")
    assert turn["status"] == "needs_confirmation"


def test_a_background_farm_with_a_null_value_is_refused_with_the_reason(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    (turn,) = converse(home, fake_openai, "real_run_loop", "keep farming credits in the background")
    assert turn["status"] == "failed" and tools_run(turn) == [("demo.loop_farm", "rejected")]


@pytest.mark.parametrize(
    ("session", "message", "tools"),
    [
        ("real_run_progress", "进度怎么样？", [("demo.status", "completed")]),
        ("real_run_abilities", "what can you do?", []),
        ("real_run_farmed_so_far", "how many times have I farmed so far", [("demo.status", "completed")]),
    ],
)
def test_questions_are_answered_and_complete(
    home: Path, fake_openai: FakeOpenAI, session: str, message: str, tools: list[tuple[str, str]]
) -> None:
    (turn,) = converse(home, fake_openai, session, message)
    assert turn["status"] == "completed" and tools_run(turn) == tools


def test_a_result_the_model_made_up_is_never_taken_for_the_farm(home: Path, fake_openai: FakeOpenAI) -> None:
    """After the start, the model wrote a farm's result itself ("completed") instead of calling it, twice;
    that made-up result was once the turn's answer."""
    (turn,) = converse(home, fake_openai, "real_run_made_up_result", "打开游戏然后刷两次经验书")
    assert turn["status"] == "failed" and tools_run(turn) == [("demo.start_game", "completed")]
    assert "instead of calling the tool" in turn["final"]
    assert game.load_state(home)["farm_attempts_total"] == 0


def test_a_destructive_call_asks_the_person_and_runs_once_on_their_yes(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    """The model wrote the salvage call and, after it, the result it imagined; only the call counts."""
    started, asked, answered = converse(
        home, fake_openai, "real_run_salvage_confirmed", "启动游戏", "分解四星遗器", "是"
    )
    assert started["status"] == "completed"
    assert asked["status"] == "needs_confirmation" and tools_run(asked) == []
    assert answered["status"] == "completed" and tools_run(answered) == [("demo.salvage_relics", "completed")]
    assert "Salvaged 2" in answered["final"]
