"""``web.summarize_text``: the deterministic extractive summary (Chinese and English) with the offline
model, the configured model's summary (a fake OpenAI-compatible server on 127.0.0.1), and the source
kept and cited either way."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fake_openai import FakeOpenAI, chunk
from tests.support.helpers import ROOT
from tether.execution.executor import Executor
from tether.resilience import BreakerState, ResilienceRegistry, breakers_dir
from tether.tasks.result import TaskStatus
from tether.toolkits.web.specs import registry
from tether.toolkits.web.summarize import extractive, split_sentences, terms

EN = (
    "Tether runs language-model agents under control. The model chooses among audited tasks. "
    "Every call passes through the executor, the trust boundary. The weather was pleasant that day. "
    "Each task runs in its own worker process. Workers publish their results through files. "
    "Lunch was served at noon. The executor validates parameters before any worker starts."
)
ZH = (
    "受控自治的智能体由模型选择任务。每一次调用都经过执行器，执行器是信任边界。"
    "那天天气很好，大家去公园散步！执行器在启动工作进程之前检查参数；"
    "每个任务都在自己的工作进程中运行。午饭在中午供应？工作进程通过文件发布结果。"
)


@pytest.fixture
def web(make_executor: Callable[..., Executor]) -> Executor:
    return make_executor(registry)


def summarize(web: Executor, **params: Any) -> Any:
    return web.execute_sync("web.summarize_text", params, caller="agent")


def test_sentences_split_on_chinese_and_english_marks() -> None:
    assert split_sentences("第一句。第二句！第三句？第四句；\nLine five. Line six!") == [
        "第一句。", "第二句！", "第三句？", "第四句；", "Line five.", "Line six!",
    ]  # fmt: skip
    assert split_sentences("e.g. version 1.2 works. Next one") == ["e.g. version 1.2 works.", "Next one"]


def test_terms_are_english_words_and_chinese_bigrams() -> None:
    assert terms("The Executor validates 执行器检查") == [
        "executor",
        "validates",
        "执行",
        "行器",
        "器检",
        "检查",
    ]


def test_the_extractive_summary_keeps_order_and_drops_the_off_topic() -> None:
    chosen = extractive(EN, max_sentences=3)
    assert len(chosen) == 3
    assert all(s in EN for s in chosen)
    assert chosen == sorted(chosen, key=EN.index)
    assert "The weather was pleasant that day." not in chosen and "Lunch was served at noon." not in chosen


def test_the_focus_pulls_in_sentences_about_it() -> None:
    assert any("weather" in s for s in extractive(EN, focus="weather", max_sentences=2))
    assert any("天气" in s for s in extractive(ZH, focus="天气", max_sentences=2))


def test_the_chinese_summary_is_made_of_the_texts_sentences() -> None:
    chosen = extractive(ZH, max_sentences=3)
    assert len(chosen) == 3 and all(s in ZH for s in chosen)
    assert any("执行器" in s for s in chosen)


def test_the_extractive_summary_is_deterministic() -> None:
    assert extractive(EN + ZH, "executor 执行器", 4) == extractive(EN + ZH, "executor 执行器", 4)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000), st.text(max_size=50), st.integers(min_value=1, max_value=12))
def test_any_text_gives_a_bounded_summary(text: str, focus: str, n: int) -> None:
    chosen = extractive(text, focus, n)
    assert len(chosen) <= n
    assert all(s and len(s) <= 400 for s in chosen)


def test_offline_summary_through_the_executor_cites_its_source(web: Executor) -> None:
    result = summarize(
        web,
        text=ZH,
        focus="执行器",
        max_sentences=2,
        source_url="https://example.com/a",
        source_title="信任边界",
    )
    assert result.status is TaskStatus.COMPLETED, result
    data = result.data
    assert data["method"] == "extractive"
    assert data["sources"] == [{"n": 1, "url": "https://example.com/a", "title": "信任边界"}]
    lines = data["summary"].splitlines()
    assert len(lines) == 2 and all(line.startswith("- ") and line.endswith(" [1]") for line in lines)
    assert "[1] 信任边界 — https://example.com/a" in result.message


def test_without_a_source_nothing_is_cited(web: Executor) -> None:
    result = summarize(web, text=EN, max_sentences=2)
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["sources"] == [] and "[1]" not in result.data["summary"]


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"text": ""}, "at least 1 character"),
        ({"text": "x", "max_sentences": 13}, "less than or equal to 12"),
        ({"text": "x", "focus": "f" * 201}, "at most 200 characters"),
        ({"text": "x", "style": "short"}, "style"),
    ],
)
def test_bad_summary_arguments_are_rejected_with_the_rule(
    web: Executor, params: dict[str, Any], says: str
) -> None:
    result = summarize(web, **params)
    assert result.status is TaskStatus.REJECTED, result
    assert says in result.message


def test_white_space_alone_is_not_summarized(web: Executor) -> None:
    result = summarize(web, text="  \n ")
    assert result.status is TaskStatus.FAILED and "no text to summarize" in result.message, result


# -- the configured model ---------------------------------------------------------------------------


def use_model(home: Path, url: str) -> None:
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "fake"\nmodel = "gpt-4o-mini"\nbase_url = "{url}"\nretry_max_attempts = 1\n'
        "breaker_failure_threshold = 100\n",
        encoding="utf-8",
    )


def test_a_configured_model_writes_the_summary_and_cites(web: Executor, home: Path, fake_openai: Any) -> None:
    fake: FakeOpenAI = fake_openai
    use_model(home, fake.url)
    answer = "- 执行器是信任边界\n- 每个任务在自己的进程中运行"
    fake.stream([chunk({"role": "assistant", "content": answer}), chunk({}, finish_reason="stop")])
    result = summarize(
        web, text=ZH, focus="执行器", source_url="https://example.com/zh", source_title="受控自治"
    )
    assert result.status is TaskStatus.COMPLETED, result
    data = result.data
    assert data["method"] == "model" and data["model"] == "gpt-4o-mini"
    assert data["summary"].startswith("- 执行器是信任边界") and data["summary"].endswith("[1]")
    assert data["sources"] == [{"n": 1, "url": "https://example.com/zh", "title": "受控自治"}]
    messages = fake.requests[-1]["messages"]
    assert "Concentrate on: 执行器" in messages[0]["content"] and "[1]" in messages[0]["content"]
    assert "Source [1]: 受控自治 https://example.com/zh" in messages[1]["content"]
    assert ZH in messages[1]["content"]
    assert not fake.requests[-1].get("tools")


def test_a_failing_model_falls_back_to_the_extractive_summary_and_says_why(
    web: Executor, home: Path, fake_openai: Any
) -> None:
    fake: FakeOpenAI = fake_openai
    use_model(home, fake.url)  # nothing scripted: the fake answers HTTP 500
    result = summarize(web, text=EN, max_sentences=2)
    assert result.status is TaskStatus.COMPLETED, result
    assert result.data["method"] == "extractive"
    assert "the configured model could not summarize" in result.data["note"]


def test_consecutive_model_failures_across_calls_open_one_shared_breaker(
    web: Executor, home: Path, fake_openai: Any
) -> None:
    """Each call builds its model afresh, yet the breaker is the home's (kept in its state folder): the
    failures of separate calls add up, the open breaker stops the next call before any request, and
    the runtime's own registry (the agent's model calls) sees the same open breaker."""
    fake: FakeOpenAI = fake_openai  # nothing scripted: every request is answered HTTP 500
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "fake"\nmodel = "gpt-4o-mini"\nbase_url = "{fake.url}"\n'
        "retry_max_attempts = 1\nbreaker_failure_threshold = 2\nbreaker_recovery_s = 600\n",
        encoding="utf-8",
    )
    notes = [summarize(web, text=EN, max_sentences=2).data["note"] for _ in range(3)]
    assert all("the configured model could not summarize" in note for note in notes), notes
    assert "HTTP 500" in notes[0] and "HTTP 500" in notes[1]
    assert "failed repeatedly" in notes[2], notes[2]
    assert len(fake.requests) == 2  # the third call never reached the service
    runtimes = ResilienceRegistry(state_dir=breakers_dir(home))  # as tether.runtime builds its own
    assert runtimes.for_url(fake.url).breaker.state is BreakerState.OPEN


def test_the_offline_path_never_imports_a_model_client(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tether.toolkits.web.summarize import Source, summarize\n"
        f"s = summarize(Path({str(tmp_path)!r}), 'One. Two. Three.', '', Source(), 2)\n"
        "assert s.method == 'extractive', s\n"
        "assert 'openai' not in sys.modules, 'openai was imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_menus_and_bare_headings_left_by_extraction_are_not_summarized() -> None:
    from tether.toolkits.web.summarize import extractive

    text = "首页 | 关于\n太阳能发电原理\n太阳能电池利用光伏效应把阳光直接转换成电能。\n硅是最常见的电池材料。"
    assert extractive(text, "太阳能") == [
        "太阳能电池利用光伏效应把阳光直接转换成电能。",
        "硅是最常见的电池材料。",
    ]
    assert extractive("Only a heading") == ["Only a heading"]  # nothing else: the fragment is what there is
