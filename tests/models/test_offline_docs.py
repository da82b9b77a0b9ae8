"""The offline model's research and document plans, driven turn by turn with recorded tool results:
each call follows from the results before it, in Chinese and English, and the answer cites its sources."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether.agent.surface import ToolSurface
from tether.models.base import Message, TurnContext
from tether.models.offline import OfflineModel
from tether.models.offline_docs import formats_in_words, read_intent
from tether.toolkits.standard import registry

Responder = Callable[[str, dict[str, Any]], dict[str, Any]]


def tools(home: Path | None = None) -> list[Any]:
    return list(ToolSurface(registry, "agent", home).tools)


def drive(request: str, respond: Responder, *, context: TurnContext | None = None, home: Path | None = None,
          limit: int = 20) -> tuple[list[tuple[str, dict[str, Any]]], str]:  # fmt: skip
    """Run the offline model on ``request`` until it answers; ``respond`` plays the executor."""
    model = OfflineModel()
    messages: list[Message] = [{"role": "system", "content": "x"}, {"role": "user", "content": request}]
    calls: list[tuple[str, dict[str, Any]]] = []
    surface = tools(home)
    for _ in range(limit):
        response = asyncio.run(model.complete(messages, surface, context=context))
        if not response.tool_calls:
            return calls, response.text or ""
        (call,) = response.tool_calls
        calls.append((call.name, call.arguments))
        messages.append({"role": "assistant", "content": "", "tool_calls": [call.to_message()]})
        result = {"status": "completed", "message": "ok", "data": respond(call.name, call.arguments)}
        messages.append(
            {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result, ensure_ascii=False)}
        )
    pytest.fail(f"no answer after {limit} calls: {calls}")


PAGES = {
    "https://a.example/solar": (
        "太阳能发电原理",
        "太阳能电池把光转换成电。光伏效应是核心。效率约为百分之二十。",
    ),
    "https://b.example/grid": ("并网与储能", "太阳能发电需要并网。储能电池平衡昼夜差异。成本逐年下降。"),
    "https://c.example/cost": ("成本趋势", "光伏组件价格十年下降九成。太阳能已是最便宜的电力之一。"),
}


def web(name: str, args: dict[str, Any]) -> dict[str, Any]:
    if name == "web__search":
        return {"results": [{"title": t, "url": u, "snippet": ""} for u, (t, _) in PAGES.items()]}
    if name == "web__read_url":
        title, text = PAGES[args["url"]]
        return {"url": args["url"], "title": title, "text": text}
    if name == "web__summarize_text":
        first = args["text"].split("。")[0]
        return {"summary": f"- {first}。 [1]", "sources": [{"n": 1, "url": args["source_url"]}]}
    if name == "documents__generate":
        return {"artifacts": [{"format": f, "name": f"x.{f}", "path": f"artifacts/e/x.{f}", "size": 1}
                              for f in args.get("formats", [])]}  # fmt: skip
    raise AssertionError(name)


def searchable(tmp_path: Path) -> Path:
    (tmp_path / "settings.toml").write_text(
        '[research]\nsearch_provider = "searxng"\nsearxng_url = "http://127.0.0.1:9"\n'
    )
    return tmp_path


def test_research_reads_the_top_pages_summarizes_each_and_writes_a_cited_handout(tmp_path: Path) -> None:
    calls, answer = drive("搜索一下 太阳能发电 然后写成讲义，做成PPT和PDF", web, home=searchable(tmp_path))
    names = [name for name, _ in calls]
    assert names == ["web__search"] + ["web__read_url"] * 3 + ["web__summarize_text"] * 3 + [
        "documents__generate"
    ]
    assert calls[0][1]["query"] == "太阳能发电"
    generate = calls[-1][1]
    assert generate["formats"] == ["pptx", "pdf"] and "讲义" in generate["title"]
    assert "## 来源" in generate["content"] and "https://b.example/grid" in generate["content"]
    assert "[2]" in generate["content"]
    assert "太阳能电池把光转换成电" in answer and "[1] 太阳能发电原理 — https://a.example/solar" in answer
    assert "x.pptx" in answer


def test_research_in_english_without_a_format_leaves_the_choice_to_the_follow_up(tmp_path: Path) -> None:
    calls, answer = drive("research solar power and write a report", web, home=searchable(tmp_path))
    assert calls[0] == ("web__search", {"query": "solar power", "k": 5})
    assert calls[-1][0] == "documents__generate" and "formats" not in calls[-1][1]
    assert answer.startswith("I searched for 'solar power' and read 3 pages")


def test_without_a_search_provider_it_says_why_and_runs_nothing(tmp_path: Path) -> None:
    unavailable = tuple(ToolSurface(registry, "agent", tmp_path).unavailable.items())
    calls, answer = drive(
        "搜索一下 太阳能 然后写成讲义", web, context=TurnContext(unavailable=unavailable), home=tmp_path
    )
    assert calls == []
    assert "web.search" in answer and "search_provider" in answer


def test_a_folder_of_notes_becomes_one_deck(tmp_path: Path) -> None:
    notes = {"a.md": "# 机器学习\n\n- 监督学习", "b.md": "## Deep learning\n\n- layers", "c.txt": "plain"}

    def files(name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name == "workspace__list":
            entries = [{"name": n, "kind": "file"} for n in notes] + [{"name": "img.png", "kind": "file"}]
            return {"path": "notes", "entries": entries}
        if name == "workspace__read":
            return {"path": args["path"], "text": notes[args["path"].split("/")[-1]]}
        return web(name, args)

    calls, answer = drive("把 notes/ 里的 markdown 做成一份 PPT", files)
    assert calls[0] == ("workspace__list", {"path": "notes", "pattern": "*.md"})
    assert [c[1]["path"] for c in calls if c[0] == "workspace__read"] == [
        "notes/a.md",
        "notes/b.md",
        "notes/c.txt",
    ]
    generate = calls[-1][1]
    assert generate["formats"] == ["pptx"]
    assert "## 机器学习" in generate["content"] and "## Deep learning" in generate["content"]
    assert "3 个文件" in answer and "x.pptx" in answer


@pytest.mark.parametrize(
    "request_text",
    [
        "做成 PPT：\n- 光伏组件十年降价九成 [1]\n- 储能平衡昼夜差异 [1]",
        "make slides: solar panels got 90% cheaper in ten years",
    ],
)
def test_content_given_after_a_colon_is_made_into_the_file_asked_for(request_text: str) -> None:
    """What a manager hands a documents agent ("做成 PPT：<the research's answer>") is the content itself."""
    calls, answer = drive(request_text, web)
    ((name, args),) = calls
    content = request_text.split("：" if "：" in request_text else ": ", 1)[1].strip()
    assert name == "documents__generate" and args["content"] == content and args["formats"] == ["pptx"]
    assert "[1]" not in args["title"] and args["title"].startswith(("光伏组件十年降价九成", "solar panels"))
    assert "x.pptx" in answer


def test_one_file_is_read_and_summarized_in_its_language() -> None:
    def one(name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name == "workspace__read":
            return {"path": args["path"], "text": "Revenue grew 12%. Costs fell. Outlook is stable."}
        return web(name, args)

    calls, answer = drive("summarize report.pdf", one)
    assert [c[0] for c in calls] == ["workspace__read", "web__summarize_text"]
    assert calls[0][1] == {"path": "report.pdf"}
    assert "Revenue grew 12%" in answer


def test_a_failed_step_ends_the_plan_with_what_failed(tmp_path: Path) -> None:
    model = OfflineModel()
    request = "read https://a.example/x and summarize it"
    call = asyncio.run(model.complete([{"role": "user", "content": request}], tools())).tool_calls[0]
    failed = {"status": "failed", "message": "the address is refused: 10.0.0.1 is a private network"}
    messages: list[Message] = [
        {"role": "user", "content": request},
        {"role": "assistant", "content": "", "tool_calls": [call.to_message()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps(failed)},
    ]
    answer = asyncio.run(model.complete(messages, tools())).text
    assert "web.read_url did not succeed" in answer and "private network" in answer


def test_saving_over_a_file_asks_for_an_overwrite_only_when_told_to() -> None:
    surface = tools()
    intent = read_intent("搜索一下 光伏 然后写成讲义 保存到 handout 覆盖旧的", surface, True)
    assert intent is not None and intent.save_to == "handout" and intent.overwrite
    plain = read_intent("research solar and save it as handout.pdf", surface, False)
    assert plain is not None and plain.save_to == "handout.pdf" and not plain.overwrite
    topic = read_intent("research how to replace a car battery, save it to notes/battery", surface, False)
    assert topic is not None and topic.save_to == "notes/battery" and not topic.overwrite
    told = read_intent(
        "research car batteries, save it to notes/battery and replace the old one", surface, False
    )
    assert told is not None and told.overwrite


@pytest.mark.parametrize(
    ("request_text", "formats"),
    [("做成幻灯片", ("pptx",)), ("写成讲义", ("pdf",)), ("make slides and a PDF", ("pptx", "pdf")),
     ("写一份笔记", ()), ("export a web page", ("html",))],
)  # fmt: skip
def test_the_follow_up_reads_formats_from_words(request_text: str, formats: tuple[str, ...]) -> None:
    assert formats_in_words(request_text) == formats
    answer = asyncio.run(OfflineModel().complete([], [], context=TurnContext(formats_question=request_text)))
    assert json.loads(answer.text or "") == {"formats": list(formats)}


@pytest.mark.parametrize(
    "request_text", ["启动游戏，然后分解四星遗器", "查看游戏状态", "后台一直刷金币", "每日实训"]
)
def test_the_demo_requests_are_not_taken_for_documents(request_text: str) -> None:
    assert read_intent(request_text, tools(), True) is None
