"""The offline model: a deterministic planner that maps plain requests onto the tool surface.

The default when no model is configured, so tether runs on a fresh machine with no key and no network.
It reads the person's last message and the tools (names, descriptions, aliases, catalog words, parameter
types), splits the request into steps on connectives (然后, 再, 并且, 接着, "and then", "then", "," "；" …),
picks a tool per step by the longest word it recognises, extracts numbers (3, 三, 十二, "three") and
catalog values, and emits one call per turn. It asks "which one?" with the allowed values when a step is
ambiguous, says plainly what it cannot do, and stops at the first result that did not complete.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.models.base import BudgetReview, Message, ModelResponse, OpenJob, ToolCall, ToolDef, TurnContext

SPLIT = re.compile(
    r"(?:然后|接着|之后|随后|并且|再|，|,|；|;|。|、|\band then\b|\bthen\b|\bafter that\b|\band\b)",
    re.IGNORECASE,
)
EXECUTION_ID = re.compile(r"\b[0-9a-f]{19}\b")
CJK = re.compile(r"[\u4e00-\u9fff]")
DIGITS = re.compile(r"(?<![A-Za-z0-9_.])(\d{1,6})(?![0-9.])")
ZH_NUMBER = re.compile(r"([零一二两三四五六七八九十百]+)\s*(?:次|遍|轮|回|场|个|把|星|下)")
EN_NUMBERS = {
    "once": 1,
    "twice": 2,
    "thrice": 3,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "fifteen": 15,
    "twenty": 20,
}
EN_NUMBER = re.compile(r"\b(" + "|".join(EN_NUMBERS) + r")\b", re.IGNORECASE)
ZH_DIGITS = {
    "零": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
OK_STATUSES = ("completed", "running")


def zh_number(text: str) -> int | None:
    """三 → 3, 十二 → 12, 二十五 → 25, 一百 → 100."""
    total, current = 0, 0
    for ch in text:
        if ch in ZH_DIGITS:
            current = ZH_DIGITS[ch]
        elif ch == "十":
            total += (current or 1) * 10
            current = 0
        elif ch == "百":
            total += (current or 1) * 100
            current = 0
        else:
            return None
    return total + current


def numbers_in(text: str) -> list[int]:
    found: list[tuple[int, int]] = [(m.start(), int(m.group(1))) for m in DIGITS.finditer(text)]
    for m in ZH_NUMBER.finditer(text):
        value = zh_number(m.group(1))
        if value is not None:
            found.append((m.start(), value))
    found += [(m.start(), EN_NUMBERS[m.group(1).lower()]) for m in EN_NUMBER.finditer(text)]
    return [value for _, value in sorted(found)]


def fold(text: str) -> str:
    """Width- and case-folded, with runs of spaces kept as one (English words need their spaces)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _contains(clause: str, word: str) -> bool:
    """Whole-word for Latin words, substring for Chinese, both on folded text."""
    key = fold(word)
    if not key:
        return False
    if CJK.search(key):
        return key in clause
    return re.search(rf"(?<![a-z0-9]){re.escape(key)}(?![a-z0-9])", clause) is not None


def _tool_words(tool: ToolDef) -> list[str]:
    words = list(tool.aliases)
    parts = tool.name.split("__")[-1]
    words.append(parts.replace("_", " "))
    return words


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    say: str | None = None  # a question or an explanation instead of a call
    # Said instead of making the call if it is still unresolved when its turn comes (no job to stop).
    unresolved: str | None = None


class Texts:
    def __init__(self, zh: bool) -> None:
        self.zh = zh

    def which(self, what: str, allowed: Sequence[str]) -> str:
        label = what.replace("_", " ")
        if self.zh:
            return f"请问 {label} 选哪一个？可选：{'、'.join(allowed)}。"
        return f"Which {label}? Allowed: {', '.join(allowed)}."

    def cannot(self, clause: str, tools: Sequence[ToolDef]) -> str:
        names = ", ".join(t.name.replace("__", ".") for t in tools if t.kind == "business")
        if self.zh:
            return f"我做不到“{clause}”：没有对应的工具。我能做的有：{names}。"
        return f"I can't do “{clause}”: none of my tools does that. I can: {names}."

    def no_job(self) -> str:
        return "现在没有正在运行的任务。" if self.zh else "There is no running job to do that to."

    def result(self, name: str, result: dict[str, Any]) -> str:
        task = name.replace("__", ".")
        status = result.get("status", "?")
        message = result.get("message", "")
        eid = result.get("execution_id", "")
        if status == "running":
            return (
                f"{task} 正在后台运行（execution_id {eid}）。"
                if self.zh
                else f"{task} is running in the background (execution_id {eid})."
            )
        if status == "completed":
            return f"{task}：{message}" if self.zh else f"{task}: {message}"
        return f"{task} {status}：{message}" if self.zh else f"{task} {status}: {message}"

    def job(self, result: dict[str, Any]) -> str:
        """A control tool's answer: the job's state, in words."""
        data = result.get("data") or {}
        progress = (data.get("progress") or {}).get("message")
        task, status, eid = (
            result.get("task_id", "?"),
            result.get("status", "?"),
            result.get("execution_id", ""),
        )
        if self.zh:
            text = f"任务 {task}（{eid}）：{status}"
            text += f"，进度：{progress}" if progress else ""
            return text + (f"。{result.get('message')}" if status != "running" else "。")
        text = f"Job {task} ({eid}): {status}"
        text += f", progress: {progress}" if progress else ""
        return text + (f". {result.get('message')}" if status != "running" else ".")

    def halted(self) -> str:
        return "因此我没有继续后面的步骤。" if self.zh else "So I did not go on with the remaining steps."

    def cancelled(self) -> str:
        return "好的，已取消，什么都没有执行。" if self.zh else "OK, cancelled: nothing was run."

    def nothing(self) -> str:
        return "请告诉我要做什么。" if self.zh else "Tell me what to do."


class OfflineModel:
    name = "offline"
    supports_tools = True

    def __init__(self, language: str | None = None) -> None:
        self.language = language

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], *, context: TurnContext | None = None
    ) -> ModelResponse:
        context = context or TurnContext()
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        anchor = users[-1] if users else -1
        request = str(messages[anchor].get("content") or "") if anchor >= 0 else ""
        if not tools:
            return ModelResponse(text=self._review(context.review), model=self.name)
        if context.answer is False:
            return ModelResponse(text=Texts(self._zh(request)).cancelled(), model=self.name)
        if context.answer is True and len(users) >= 2:
            # The person confirmed a call: carry on with the request that led to it.
            anchor = users[-2]
            request = str(messages[anchor].get("content") or "")
        texts = Texts(self._zh(request))
        after = [m for m in messages[anchor + 1 :] if m.get("role") != "user"]
        calls: list[tuple[str, dict[str, Any]]] = []
        pending: dict[str, str] = {}
        for message in after:
            for call in message.get("tool_calls") or []:
                pending[call["id"]] = call["function"]["name"]
            if message.get("role") == "tool":
                name = pending.get(str(message.get("tool_call_id")), "tool")
                result = _result(message.get("content"))
                if result.get("status") != "needs_confirmation":
                    calls.append((name, result))
        kinds = {tool.name: tool.kind for tool in tools}
        if calls and kinds.get(calls[-1][0]) != "control" and calls[-1][1].get("status") not in OK_STATUSES:
            return self._final(calls, texts, halted=True, kinds=kinds)
        plan = self.plan(request, tools, messages, context.open_jobs)
        done = len(calls)
        todo = [step for step in plan if step.tool is not None]
        if done < len(todo) and all(step.say is None for step in plan[: plan.index(todo[done]) + 1]):
            step = todo[done]
            assert step.tool is not None
            if step.unresolved is not None:
                return self._final(calls, texts, extra=[step.unresolved], kinds=kinds)
            call = ToolCall(id=f"offline_{done}", name=step.tool, arguments=step.args)
            return ModelResponse(tool_calls=(call,), model=self.name)
        says = [step.say for step in plan if step.say]
        return self._final(calls, texts, extra=says[:1] or ([] if calls else [texts.nothing()]), kinds=kinds)

    def _zh(self, request: str) -> bool:
        if self.language is not None:
            return self.language == "zh"
        return bool(CJK.search(request))

    def _final(
        self,
        calls: list[tuple[str, dict[str, Any]]],
        texts: Texts,
        *,
        halted: bool = False,
        extra: Sequence[str] = (),
        kinds: Mapping[str, str] | None = None,
    ) -> ModelResponse:
        kinds = kinds or {}
        lines = [
            texts.job(result) if kinds.get(name) == "control" else texts.result(name, result)
            for name, result in calls
        ]
        if halted:
            lines.append(texts.halted())
        lines.extend(extra)
        return ModelResponse(text="\n".join(lines), model=self.name)

    def _review(self, review: BudgetReview | None) -> str:
        """The manager's answer to a budget review: extend while steps still complete."""
        if review is None:
            return json.dumps({"stop": "no review data"})
        if review.completed_steps > 0 and review.failed_steps == 0:
            return json.dumps({"extend": review.extend_by})
        return json.dumps({"stop": "the last steps made no progress"})

    # -- planning -------------------------------------------------------------------------------

    def plan(
        self,
        request: str,
        tools: Sequence[ToolDef],
        messages: Sequence[Message] = (),
        open_jobs: Sequence[OpenJob] | None = None,
    ) -> list[Step]:
        texts = Texts(self._zh(request))
        steps: list[Step] = []
        for raw in SPLIT.split(request):
            clause = raw.strip(" \t\n.!?！？")
            if not clause:
                continue
            step = self._step(clause, tools, messages, texts, steps, open_jobs)
            if step is None:
                continue
            steps.append(step)
            if step.say is not None:
                break
        return steps

    def _step(
        self,
        clause: str,
        tools: Sequence[ToolDef],
        messages: Sequence[Message],
        texts: Texts,
        before: list[Step],
        open_jobs: Sequence[OpenJob] | None,
    ) -> Step | None:
        key = fold(clause)
        best: tuple[int, int, ToolDef] | None = None
        for order, tool in enumerate(tools):
            score = max((len(fold(w)) for w in _tool_words(tool) if _contains(key, w)), default=0)
            if score == 0 and _catalog_hits(key, tool):
                score = 1  # "金币副本 3 次": only the catalog word says which tool
            if score == 0:
                continue
            rank = (score, 1 if tool.kind == "control" else 0)
            if best is None or rank > (best[0], best[1]):
                best = (rank[0], rank[1], tool)
            del order
        if best is None:
            if numbers_in(clause) and before and before[-1].tool is not None:
                return None  # "…, 3 times" continues the previous step
            return Step(say=texts.cannot(clause, tools))
        tool = best[2]
        if tool.kind == "control":
            return self._control(tool, clause, messages, texts, open_jobs)
        return self._arguments(tool, key, clause, texts)

    def _control(
        self,
        tool: ToolDef,
        clause: str,
        messages: Sequence[Message],
        texts: Texts,
        open_jobs: Sequence[OpenJob] | None,
    ) -> Step:
        explicit = EXECUTION_ID.search(clause)
        eid = explicit.group(0) if explicit else _latest_job(messages, open_jobs)
        if eid is None:
            return Step(tool=tool.name, unresolved=texts.no_job())
        return Step(tool=tool.name, args={"execution_id": eid})

    def _arguments(self, tool: ToolDef, key: str, clause: str, texts: Texts) -> Step:
        props: dict[str, Any] = dict(tool.parameters.get("properties", {}))
        required = set(tool.parameters.get("required", []))
        args: dict[str, Any] = {}
        for name, words in tool.value_words.items():
            found = _longest(key, words)
            if found is not None:
                args[name] = found
        for name, scoped in tool.scoped_words.items():
            parent = tool.depends_on[name]
            matches = [
                (length, parent_value, canonical)
                for parent_value, words in scoped.items()
                if parent not in args or args[parent] == parent_value
                for canonical, length in _matches(key, words)
            ]
            if matches:
                top = max(length for length, _, _ in matches)
                best = {(p, c) for length, p, c in matches if length == top}
                if len(best) == 1:
                    parent_value, canonical = best.pop()
                    args[name] = canonical
                    args.setdefault(parent, parent_value)
                elif name in required:
                    return Step(say=texts.which(name, sorted({c for _, c in best})))
            elif name in required:
                if parent in args:
                    return Step(say=texts.which(name, list(scoped[args[parent]])))
                return Step(say=texts.which(parent, list(scoped)))
        numbers = numbers_in(clause)
        for name, prop in props.items():
            if name in args:
                continue
            if _is_int(prop) and numbers:
                args[name] = numbers.pop(0)
            elif name in required:
                allowed = prop.get("enum") or _enum_of(prop)
                if allowed:
                    return Step(say=texts.which(name, [str(v) for v in allowed]))
                return Step(say=texts.which(name, [prop.get("description", name)]))
        return Step(tool=tool.name, args=args)


def _matches(key: str, words: Mapping[str, tuple[str, ...]]) -> list[tuple[str, int]]:
    out = []
    for canonical, aliases in words.items():
        lengths = [len(fold(w)) for w in (canonical, *aliases) if _contains(key, w)]
        if lengths:
            out.append((canonical, max(lengths)))
    return out


def _longest(key: str, words: Mapping[str, tuple[str, ...]]) -> str | None:
    found = _matches(key, words)
    if not found:
        return None
    top = max(length for _, length in found)
    winners = [canonical for canonical, length in found if length == top]
    return winners[0] if len(winners) == 1 else None


def _catalog_hits(key: str, tool: ToolDef) -> bool:
    if any(_matches(key, words) for words in tool.value_words.values()):
        return True
    return any(_matches(key, words) for scoped in tool.scoped_words.values() for words in scoped.values())


def _is_int(prop: dict[str, Any]) -> bool:
    if prop.get("type") == "integer":
        return True
    if any(option.get("type") == "integer" for option in prop.get("anyOf", [])):
        return True
    enum = prop.get("enum")
    return bool(enum) and all(isinstance(v, int) for v in enum)


def _enum_of(prop: dict[str, Any]) -> list[Any]:
    for option in prop.get("anyOf", []):
        if option.get("enum"):
            return list(option["enum"])
    return []


def _result(content: object) -> dict[str, Any]:
    try:
        value = json.loads(str(content))
    except ValueError:
        return {"status": "failed", "message": str(content)}
    return value if isinstance(value, dict) else {"status": "failed", "message": str(value)}


def _latest_job(messages: Sequence[Message], open_jobs: Sequence[OpenJob] | None) -> str | None:
    """The newest open job: from the loop's list of open jobs when it gave one (it is fresh), else the
    newest background job the conversation started and did not see end."""
    if open_jobs is not None:
        return open_jobs[0].execution_id if open_jobs else None
    ended: set[str] = set()
    for message in reversed(messages):
        if message.get("role") != "tool":
            continue
        result = _result(message.get("content"))
        eid = str(result.get("execution_id") or "")
        if result.get("status") in ("completed", "failed", "stopped"):
            ended.add(eid)
        elif result.get("status") == "running" and eid not in ended:
            return eid
    return None
