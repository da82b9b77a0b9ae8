"""The offline model on requests it was never tuned on (issue 23): handled / total per half and language.

The labelled table ``bench/data/offline_requests.json`` holds requests a person would type to the demo
toolkit and the standard toolkits, in Chinese and English, each labelled with what should happen: the
calls to make (``do``), a question that offers the allowed values (``ask``), an answer to a question
(``answer``), or a plain "I can't" that runs nothing (``cannot``). Two halves: ``tune`` (the rules may be
changed when one of its rows fails; its misses are printed) and ``held`` (written before the planner's
code was read, never used to change it; only its figure is printed).

A row is handled when the model makes exactly the expected calls (expected arguments a subset of the
made ones; tools listed under ``may`` are allowed in between), its reply says every ``says`` entry
(``a|b``: either) and none of ``not``, it answers in the person's language, and nothing destructive ran
that the row did not ask for (counted on its own line: it must stay 0).

Every call is answered the way the session would, with a completed result (a running one for a
background tool) and fixed state: the game runs and has farmed 7 times in all.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.agent.surface import ToolSurface
from tether.models.base import OpenJob, TurnContext
from tether.models.offline import OfflineModel
from tether.tasks.spec import Danger

DATA = Path(__file__).with_name("data") / "offline_requests.json"
JOB = "1a2b3c4d5e6f7a8b9c0"
OPEN_JOB = (OpenJob(execution_id=JOB, task_id="demo.loop_farm", status="running"),)
STATUS = {"running": True, "farm_attempts_total": 7, "daily_training_total": 1, "salvaged_total": 0}
CANNOT = "做不到|没法|无法|不能|can't|cannot|unable|not able"
NO_TOOL = ("没有对应的工具", "none of my tools")
MAX_STEPS = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    row: dict[str, Any]
    calls: list[tuple[str, dict[str, Any]]]
    reply: str
    handled: bool
    destructive_unasked: bool
    why: str


def load() -> list[dict[str, Any]]:
    return json.loads(DATA.read_text(encoding="utf-8"))["rows"]


def surfaces() -> dict[str, ToolSurface]:
    from tether.toolkits.demo.registry import registry as demo
    from tether.toolkits.standard import registry as standard

    return {"demo": ToolSurface(demo, "agent"), "standard": ToolSurface(standard, "agent")}


def _result(name: str, call_id: str, number: int, background: bool) -> dict[str, Any]:
    data: dict[str, Any] = {}
    status, message = ("running" if background else "completed"), "ok"
    if name == "demo__status":
        data, message = dict(STATUS), "the game is running"
    elif name == "get_task_status":
        status, message, data = "running", "round 3 of an open-ended loop", {"rounds_done": 3}
    body = {"task_id": name, "execution_id": f"job-{number}", "status": status, "message": message}
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(body | {"data": data})}


def _turn(
    model: OfflineModel, messages: list[dict[str, Any]], surface: ToolSurface, jobs: tuple[OpenJob, ...]
) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """One turn as the session drives it: each call answered until the model replies in words."""
    background = {tool.name for tool in surface.tools if tool.background}
    made: list[tuple[str, dict[str, Any]]] = []
    for _ in range(MAX_STEPS):
        response = asyncio.run(model.complete(messages, surface.tools, context=TurnContext(open_jobs=jobs)))
        messages.append(response.to_message())
        if not response.tool_calls:
            return made, response.text
        for call in response.tool_calls:
            made.append((call.name, call.arguments))
            messages.append(_result(call.name, call.id, len(made), call.name in background))
    return made, "(the model did not finish)"


def _says(text: str, entry: str) -> bool:
    folded = text.casefold()
    return any(option.casefold() in folded for option in entry.split("|"))


def _in_language(text: str, lang: str) -> bool:
    cjk = len(re.findall(r"[\u4e00-\u9fff]", text))
    latin = len(re.findall(r"[A-Za-z]", text))
    return cjk > 0 if lang == "zh" else latin > cjk


def judge(
    row: dict[str, Any], calls: list[tuple[str, dict[str, Any]]], reply: str, surface: ToolSurface
) -> str:
    """Why ``row`` was not handled, or "" when it was."""
    expected = [(name, args) for name, args in row.get("calls", [])]
    allowed = set(row.get("may", []))
    core = [(name, args) for name, args in calls if name not in allowed]
    names_ok = [name for name, _ in core] == [name for name, _ in expected]
    if not names_ok or any(
        any(made.get(key) != value for key, value in want.items())
        for (_, made), (_, want) in zip(core, expected, strict=False)
    ):
        return f"calls {core} (expected {expected})"
    says = list(row.get("says", []))
    never = list(row.get("not", []))
    if row["kind"] == "cannot":
        says.append(CANNOT)
    if row["kind"] in ("ask", "answer"):
        never += NO_TOOL
    missing = [entry for entry in says if not _says(reply, entry)]
    present = [entry for entry in never if entry.casefold() in reply.casefold()]
    if missing or present:
        return f"reply misses {missing} / says {present}"
    if row["kind"] != "do" and not _in_language(reply, row["lang"]):  # a done row echoes the tools' words
        return "reply is not in the person's language"
    return ""


def run_row(row: dict[str, Any], surface: ToolSurface) -> Outcome:
    model = OfflineModel()
    jobs = OPEN_JOB if row.get("jobs") else ()
    messages: list[dict[str, Any]] = [{"role": "system", "content": "system prompt"}]
    for earlier in row.get("before", []):
        messages.append({"role": "user", "content": earlier})
        _turn(model, messages, surface, jobs)
    messages.append({"role": "user", "content": row["text"]})
    calls, reply = _turn(model, messages, surface, jobs)
    asked = {name for name, _ in row.get("calls", [])}
    destructive = any(
        (spec := surface.spec(name)) is not None and spec.danger is Danger.DESTRUCTIVE and name not in asked
        for name, _ in calls
    )
    why = judge(row, calls, reply, surface)
    if destructive:
        why = "a destructive call ran unasked; " + why
    return Outcome(
        row=row, calls=calls, reply=reply, handled=not why, destructive_unasked=destructive, why=why
    )


def outcomes(half: str | None = None) -> list[Outcome]:
    kits = surfaces()
    return [run_row(row, kits[row["kit"]]) for row in load() if half in (None, row["half"])]


def figures(results: list[Outcome]) -> dict[tuple[str, str], tuple[int, int]]:
    """(half, language) → (handled, total); language "all" sums both."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for result in results:
        for lang in ("all", result.row["lang"]):
            key = (result.row["half"], lang)
            handled, total = out.get(key, (0, 0))
            out[key] = (handled + result.handled, total + 1)
    return out


def run(home: Path | None = None) -> None:
    """Print the figures; the tune half's misses under them (the held half is never looked into)."""
    results = outcomes()
    print(f"\noffline model: {len(results)} labelled requests (handled / total)")
    table = figures(results)
    for half in ("tune", "held"):
        for lang in ("all", "zh", "en"):
            handled, total = table.get((half, lang), (0, 0))
            print(f"  {half} {lang:<3}: {handled:>3} / {total:<3} ({handled / max(total, 1):.0%})")
    print(f"  destructive calls that ran unasked: {sum(r.destructive_unasked for r in results)}")
    for result in results:
        if result.row["half"] == "tune" and not result.handled:
            print(f"    tune miss: {result.row['text']!r}: {result.why[:160]}")


if __name__ == "__main__":
    run()
