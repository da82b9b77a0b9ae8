"""Whatever a person types as a goal, the offline planner answers with a checked plan or a ``PlanError``
that says why (in the goal's language): never another exception, which the web API would answer with
a 500 (``POST /api/runs {"goal": "a"}`` once did: an empty plan failed validation)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.errors import PlanError
from tether.supervisor.goals import plan_offline
from tether.supervisor.plan import Plan
from tether.supervisor.validate import problems
from tether.toolkits.demo.registry import registry as demo
from tether.toolkits.standard import registry as standard

WORDS = [
    "a", "的", "了", "the", "and", "then", "然后", "启动游戏", "刷金币", "3次", "start the game", "farm",
    "salvage", "四星遗器", "status", "?", "！", "，", " ", "x", "1", "ok", "please", "请", "帮我",
]  # fmt: skip


def _answered(goal: str, registry: object, home: Path) -> None:
    try:
        made = plan_offline(goal, registry, home=home)  # type: ignore[arg-type]
    except PlanError as exc:
        assert exc.message.strip(), goal
        return
    assert isinstance(made, Plan) and made.tasks and problems(made, registry) == []  # type: ignore[arg-type]


@pytest.mark.parametrize("goal", ["a", "的", "ok", "the", "了", "a a a"])
def test_a_goal_with_nothing_to_do_says_so_in_its_language(goal: str, tmp_path: Path) -> None:
    with pytest.raises(PlanError) as caught:
        plan_offline(goal, standard, home=tmp_path)
    message = caught.value.message
    if goal in ("的", "了"):
        assert "做不到" in message and "我能做的有" in message, message
    else:
        assert "can't do" in message and "I can:" in message, message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(goal=st.text(min_size=1, max_size=60))
def test_any_text_is_planned_or_refused_plainly(goal: str, tmp_path: Path) -> None:
    _answered(goal, demo, tmp_path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(goal=st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map("".join))
def test_any_mix_of_known_and_filler_words_is_planned_or_refused_plainly(goal: str, tmp_path: Path) -> None:
    _answered(goal, standard, tmp_path)
