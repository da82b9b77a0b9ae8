"""Goals driven by a real small model, replayed: the exchanges of llama.cpp's llama-server serving
Qwen2.5-Coder-1.5B-Instruct were recorded (``tests/support/recorder.py``; how, in each session's ``how``)
and are answered again, in order, by a local HTTP server. A goal run must tell the truth about what such
a model did: no ✓ for work that did not happen."""

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
from tether.toolkits.demo import game

SESSIONS = Path(__file__).parent / "sessions"
DEMO = ("--registry", "tether.toolkits.demo.registry:registry")
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _no_game_left(home: Path) -> Iterator[None]:
    yield
    with contextlib.suppress(ValueError, KeyError, OSError):
        os.kill(int(json.loads(game.info_path(home).read_text())["pid"]), signal.SIGKILL)


def _goal(home: Path, server: FakeOpenAI, session: str, goal: str) -> tuple[int, dict[str, Any]]:
    recorded = replay(server, SESSIONS / session)
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "llama-cpp"\nmodel = "qwen2.5-coder-1.5b"\nbase_url = "{server.url}"\n',
        encoding="utf-8",
    )
    code, out, err = tether_cli(
        *DEMO, "goal", goal, "--json", home=home, TETHER_CLI_SERVER="0", TETHER_MODEL_STREAM="0", timeout=150
    )
    assert out.strip(), err
    assert same_questions(server.requests, recorded) == []
    return code, json.loads(out)


def test_a_farm_the_real_model_got_wrong_waits_for_a_person_with_the_tools_own_answer(
    home: Path, fake_openai: FakeOpenAI
) -> None:
    """The issue's run: the model planned well, then farmed with the alias 金币 (rejected, twice), and
    `flow show` printed ✓ farm_instance completed with 0 farms in the game."""
    code, run = _goal(
        home, fake_openai, "real_goal_farm_alias.json", "启动游戏，然后刷 2 次金币副本，然后退出游戏"
    )
    tasks = {t["id"]: t for t in run["tasks"]}
    assert tasks["start_game"]["status"] == "completed"
    farm = tasks["farm_instance"]
    assert farm["status"] == "waiting_for_human" and farm["attempts"] == 2, farm
    assert "alias of '藏珍之蕾'" in farm["message"]  # what the tool said, not what the model said
    assert tasks["demo__exit_game"]["status"] == "pending"
    assert code == 3 and run["status"] == "waiting_for_human"
    assert game.load_state(home)["farm_attempts_total"] == 0
