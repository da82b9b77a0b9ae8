"""The offline planner's work grows linearly with the message, and what it says back stays short.

A 19,000-character message once cost 12 s of CPU (the serving thread of ``tether serve`` froze). Time is
not asserted here (machines are shared); the work is: the number of Python function calls the planner
makes is counted for a message and for one eight times as long, in many shapes — tool words, values,
counts, punctuation, prose, in both languages. Linear work gives a ratio near 8, quadratic near 64.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.agent.surface import tool_for
from tether.models.base import ModelResponse, ToolDef, TurnContext
from tether.models.offline import MAX_REQUEST_CHARS, OfflineModel
from tether.toolkits.standard import registry

TOOLS = [tool_for(spec) for spec in registry if "agent" in spec.exposed_to]
SMALL, LARGE = 1_250, 10_000
LINEAR_BOUND = 16  # 8x the message: linear work is ~8x the calls; quadratic would be ~64x
REPLY_LIMIT = 2_000
# The costliest shape measured (many parts, each read against every tool word) makes ~80 calls per
# character; quadratic work at this length would make thousands.
CALLS_PER_CHAR = 150

SHAPES = {
    "zh, tools without punctuation": [
        "启动游戏",
        "刷金币副本",
        "今天天气怎么样",
        "的",
        "看看进度吧",
        "退出游戏",
    ],
    "zh, tools with punctuation": ["启动游戏，", "刷金币副本。", "然后", "分解四星遗器；", "3次", "退出游戏"],
    "zh, prose": list("我们今天讨论的是一个关于太阳能发电的问题它的效率和成本都在不断变化"),
    "en, prose": ["the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dog, ", "and ", "then "],
    "en, tools": ["start the game and ", "farm gold ", "then salvage relics ", "x3 ", "read notes.md "],
    "counts and values": ["的a", "金币gold ", "x3 ", "三次", "twice ", "4星 "],
    "one letter": ["a"],
    "one character": ["的"],
    "digits": ["1234567890 "],
    "execution ids": ["1a2411dd5bdcc9ef957 "],
    "questions": ["进度怎么样？", "is the game running? ", "游戏开着没"],
}


def _message(pieces: Sequence[str], size: int, seed: int = 1) -> str:
    pick = random.Random(seed)
    text = ""
    while len(text) < size:
        text += pick.choice(pieces)
    return text[:size]


def _decide(text: str) -> ModelResponse:
    return OfflineModel().decide([{"role": "user", "content": text}], TOOLS, TurnContext())


def _calls(text: str) -> int:
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        _decide(text)
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_planners_work_grows_linearly_with_the_message(shape: str) -> None:
    pieces = SHAPES[shape]
    small, large = _calls(_message(pieces, SMALL)), _calls(_message(pieces, LARGE))
    assert large <= LINEAR_BOUND * max(small, 1), (shape, small, large)


# Half the long message: quadratic work would still be far over the budget per character there, and
# counting every call of 25 long mixes outlasted the test's time limit on a loaded machine.
MIX = LARGE // 2


@pytest.mark.timeout(180)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(sorted({p for pieces in SHAPES.values() for p in pieces} | {"，", " ", "。", "?"})),
        min_size=1,
        max_size=8,
        unique=True,
    )
)
def test_any_mix_of_words_stays_within_a_linear_budget(pieces: list[str]) -> None:
    """A mix may take another path at another length (a question at one, too many parts at the
    next), so each is held to a budget per character instead of to its own shorter self."""
    calls = _calls(_message(pieces, MIX))
    assert calls <= CALLS_PER_CHAR * MIX, (pieces, calls)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_answer_to_the_longest_message_quotes_only_a_little_of_it(shape: str) -> None:
    response = _decide(_message(SHAPES[shape], MAX_REQUEST_CHARS))
    assert len(response.text or "") <= REPLY_LIMIT, (shape, len(response.text or ""))


def test_a_message_past_what_it_reads_runs_nothing_and_says_why() -> None:
    for text, words in (("启动游戏" * 6_000, "最多读"), ("start the game " * 2_000, "reads at most")):
        response = _decide(text)
        assert not response.tool_calls
        assert words in (response.text or "") and str(MAX_REQUEST_CHARS) in (response.text or "")


def test_the_offline_model_decides_off_the_event_loop() -> None:
    """A page served on the same loop goes on while a long message is read."""
    seen: list[int] = []
    model = OfflineModel()
    original = model.decide

    def decide(*args: Any) -> ModelResponse:
        import threading

        seen.append(threading.get_ident())
        return original(*args)

    model.decide = decide  # type: ignore[method-assign]

    async def main() -> int:
        import threading

        tools: list[ToolDef] = TOOLS
        await model.complete([{"role": "user", "content": "启动游戏"}], tools)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert seen and seen[0] != loop_thread
