"""The offline model: a deterministic planner that maps plain requests onto the tool surface.

The default when no model is configured, so tether runs on a fresh machine with no key and no network.
It reads the person's request (``understand`` folds it: Traditional characters, width, stems, counts),
splits it into parts on connectives (然后, 之后, 和, "and then", "after" …, keeping their order),
recognises in each part a tool (by the longest alias), catalog values and counts, and lets a part with
no tool of its own continue the one before ("刷一下金币，刷三次", "三星和四星").

**The rule that matters most: it never executes a reading it is unsure of.** Every word of the request
must be accounted for — a tool, a value, a count, a connective or a word that carries no request
("帮我…吧", "please"). If any part is not understood (an unknown word, a negation, a value that is only
close to a known one), nothing at all is run: it asks which one, asks "did you mean …?", or says what it
could not do. It answers questions about state with the status task or the job status tool, "what can
you do?" with a summary of the tools, and speaks the person's language with localized labels.
"""

from __future__ import annotations

import asyncio
import bisect
import difflib
import functools
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.models import offline_docs
from tether.models.base import BudgetReview, Message, ModelResponse, OpenJob, ToolCall, ToolDef, TurnContext
from tether.models.understand import (
    BACKGROUND_WORDS,
    FILLER_EN,
    FILLER_ZH,
    FILLER_ZH_VERBS,
    FILLER_ZH_WORDS,
    NEGATIONS,
    Token,
    counts,
    fold,
    has_cjk,
    reorder,
    stems,
    tokens,
)
from tether.models.understand import numbers_in as numbers_in
from tether.models.understand import zh_number as zh_number

EXECUTION_ID = re.compile(r"\b[0-9a-f]{19}\b")
OK_STATUSES = ("completed", "running")

# Connectives that split a request into parts, in order. "A after B" / "A之前B" reverse the two parts.
SPLIT = re.compile(
    r"(?:然后|接着|之后|以后|随后|完了再|完再|再然后|并且|而且|同时|还要|以及|最后|接下来|和|跟|与|再|"
    r"后(?!台|面)|，|,|；|;|。|、|!|！|"
    r"\band then\b|\bthen\b|\bafter that\b|\bafterwards\b|\band\b|\balso\b|\bplus\b|&)",
)
REVERSE = re.compile(r"\bafter\b(?! that)|之前|以前")
POLITE_OPENER = re.compile(
    r"^(?:(?:can|could|would|will) you(?: please)?|please|pls|"
    r"能不能|可不可以|能否|能|可以|麻烦你?|请你?|帮我)\s*"
)
QUESTION_EN = re.compile(r"^(?:is|are|was|were|did|does|has|have|how|what|what's|whats|where|any)\b")
QUESTION_ZH = re.compile(
    r"(?:吗|(?<![什怎那这多])么|没|没有|了没|了吗|怎么样|咋样|如何|情况|是否|多少|几)了?\s*[?？]*$|有没有|是不是|几次|多少|"
    r"(?:什么|啥)(?:状态|情况|样|时候)|在干(?:什么|啥|嘛)|第几|几轮|多少轮"
)
ABILITY = re.compile(
    r"what can (?:you|it|this|the [a-z ]{1,30}?) do|what do you do|what are you able|what can i ask|"
    r"^help$|^\?$|"
    r"你能干|你能做|你会干|你会做|你会什么|你能干嘛|能干嘛|能干啥|有什么功能|有哪些功能|怎么用|^帮助$"
)
# "can I salvage …?", "what happens if …", "我可以刷金币吗": asking about an action is not asking for it.
HYPOTHETICAL = re.compile(
    r"^(?:can|could|may|should|shall|would) i\b|\bwhat (?:happens|would happen|if)\b|^what if\b|"
    r"^(?:我|咱)(?:可以|能不能|能|该不该|应该|该)|会怎样|会怎么样|会发生什么"
)
PROGRESS_WORDS = (
    "进度", "进展", "怎么样", "咋样", "完了没", "好了没", "刷得", "刷到", "progress", "how is it going",
    "how it's going", "how's it going", "done yet", "finished", "how far", "going", "刷了多少", "still",
    "还在", "第几",
)  # fmt: skip
ZH_STATUS = {
    "completed": "已完成",
    "running": "正在运行",
    "pending": "等待开始",
    "failed": "失败",
    "stopped": "已停止",
    "rejected": "被拒绝",
    "not_found": "找不到",
    "unknown": "结果未知",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    say: str | None = None  # a question or an explanation instead of a call: nothing runs
    # Said instead of making the call if it is still unresolved when its turn comes (no job to stop).
    unresolved: str | None = None
    # This step completes the one before it (a later part only added arguments): it replaces it.
    extends: bool = False


@dataclass(slots=True, kw_only=True)
class Part:
    """One part of a request, as read."""

    text: str
    tool: ToolDef | None = None
    values: dict[str, list[str]] = field(default_factory=dict)  # param → canonical values, in order
    scoped: list[tuple[str, str, str, int]] = field(default_factory=list)  # (param, parent, value, len)
    numbers: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # per number: "times" (a count) or ""
    background: bool = False
    execution_id: str | None = None
    residue: list[str] = field(default_factory=list)  # words not understood
    reading: Reading | None = None
    candidates: list[ToolDef] = field(default_factory=list)

    @property
    def has_values(self) -> bool:
        return bool(self.values or self.scoped or self.numbers)


# -- words -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _weight(word: str) -> int:
    """How much of a request ``word`` explains: its folded characters, spaces aside (cached: the same
    tool words and values are weighed for every part of every request)."""
    return len(fold(word).replace(" ", ""))


def _tool_words(tool: ToolDef) -> list[str]:
    return [*tool.aliases, tool.name.split("__")[-1].replace("_", " ")]


class Reading:
    """A part's tokens, and which of them have been understood."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokens(text)
        self.used = [False] * len(self.tokens)
        self.starts = [token.start for token in self.tokens]
        # Where each stem occurs: a word is looked for only where its first stem is, so reading a
        # request against every tool word and catalog value costs the words plus the matches, not
        # words × tokens (a long message was seconds of CPU).
        self.at: dict[str, list[int]] = {}
        for index, token in enumerate(self.tokens):
            self.at.setdefault(token.stem, []).append(index)

    def find(self, word: str) -> list[tuple[int, int]]:
        """Token ranges where ``word`` occurs among the tokens not used yet."""
        want = stems(word)
        n = len(want)
        if not n:
            return []
        found = []
        last = len(self.tokens) - n
        for i in self.at.get(want[0], ()):
            if i > last or any(self.used[i : i + n]):
                continue
            if all(self.tokens[i + k].stem == want[k] for k in range(1, n)):
                found.append((i, i + n))
        return found

    def score(self, word: str) -> int:
        return _weight(word) if self.find(word) else 0

    def take(self, word: str) -> bool:
        spans = self.find(word)
        for i, j in spans:
            for k in range(i, j):
                self.used[k] = True
        return bool(spans)

    def take_chars(self, start: int, end: int) -> None:
        k = bisect.bisect_left(self.starts, start)  # tokens are in text order
        while k < len(self.tokens) and self.tokens[k].start < end:
            if self.tokens[k].end <= end:
                self.used[k] = True
            k += 1

    def left(self) -> list[Token]:
        return [t for t, used in zip(self.tokens, self.used, strict=True) if not used]


def _residue(reading: Reading) -> list[str]:
    for word in FILLER_ZH_WORDS:
        reading.take(word)
    words = []
    for token in reading.left():
        if token.text in NEGATIONS:
            words.append(token.text)
        elif (
            token.text in FILLER_ZH
            or token.text in FILLER_ZH_VERBS
            or token.text in FILLER_EN
            or token.stem in FILLER_EN
        ):
            continue
        else:
            words.append(token.text)
    return words


def _matches(reading: Reading, words: Mapping[str, tuple[str, ...]]) -> list[tuple[str, int, int]]:
    """(canonical, length, position) for every value of ``words`` found in the reading."""
    out = []
    for canonical, aliases in words.items():
        best = (0, 0)
        for word in (canonical, *aliases):
            spans = reading.find(word)
            if spans:
                best = max(best, (_weight(word), -spans[0][0]))
        if best[0]:
            out.append((canonical, best[0], -best[1]))
    return out


def _label(tool: ToolDef, param: str, zh: bool) -> str:
    labels = tool.labels.get(param, {})
    if zh and labels.get("zh"):
        return labels["zh"]
    return labels.get("en") or param.replace("_", " ")


def _status_tool(tools: Sequence[ToolDef]) -> ToolDef | None:
    for tool in tools:
        if tool.kind == "business" and (
            tool.name.endswith("status") or any(fold(a) in ("status", "状态") for a in tool.aliases)
        ):
            return tool
    return None


# -- what it says ------------------------------------------------------------------------------


# The longest request the offline planner reads (the page's own limit): its work grows linearly with the
# request, so this bounds its time too (well under a second).
MAX_REQUEST_CHARS = 20_000
# The most parts ("start the game, then farm gold, …") one request is planned in: more is not a request
# a person makes, and values carried from part to part would make the work grow with their square.
MAX_PARTS = 40
QUOTE_CHARS = 60  # of the person's own words quoted back: enough to recognise them, never a page
QUOTE_WORDS = 6


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1].rstrip() + "…"


class Texts:
    def __init__(self, zh: bool) -> None:
        self.zh = zh

    def which(self, label: str, allowed: Sequence[str]) -> str:
        if self.zh:
            return f"请问{label}选哪一个？可选：{'、'.join(allowed)}。我还什么都没有执行。"
        return f"Which {label}? Allowed: {', '.join(allowed)}. I have not run anything yet."

    def cannot(self, part: str, tools: Sequence[ToolDef]) -> str:
        part = _quote(part)
        if self.zh:
            return f"我做不到“{part}”：没有对应的工具，所以什么都没有执行。{self.abilities(tools)}"
        return f"I can't do “{part}”: none of my tools does that, so I ran nothing. {self.abilities(tools)}"

    def unsure(self, words: Sequence[str], part: str) -> str:
        part = _quote(part)
        shown = "”“".join(_quote(word) for word in words[:QUOTE_WORDS])
        if len(words) > QUOTE_WORDS:
            shown += "”…“" + _quote(words[-1])
        if self.zh:
            return f"我没看懂“{part}”里的“{shown}”，为了不做错，什么都没有执行。请换个说法。"
        return (
            f"I'm not sure what “{shown}” means in “{part}”, so to be safe I ran nothing. "
            "Could you say it another way?"
        )

    def did_you_mean(self, guess: str) -> str:
        guess = _quote(guess)
        if self.zh:
            return f"你是说“{guess}”吗？我还什么都没有执行。"
        return f"Did you mean “{guess}”? I have not run anything yet."

    def abilities(self, tools: Sequence[ToolDef]) -> str:
        items = []
        for tool in tools:
            if tool.kind != "business":
                continue
            words = [a for a in tool.aliases if has_cjk(a) == self.zh] or [tool.name.replace("__", ".")]
            note = ""
            if tool.danger == "destructive":
                note = "（需要你确认）" if self.zh else " (asks you first)"
            elif tool.background:
                note = "（后台运行）" if self.zh else " (in the background)"
            items.append(words[0] + note)
        if self.zh:
            return f"我能做的有：{'、'.join(items)}；也能查询或停止后台任务。"
        return f"I can: {', '.join(items)}; and check on or stop background jobs."

    def hypothetical(self, tools: Sequence[ToolDef]) -> str:
        example = next(
            (a for t in tools if t.kind == "business" for a in t.aliases if has_cjk(a) == self.zh), ""
        )
        if self.zh:
            return f"这听起来是在问问题，所以我什么都没有执行。要我去做，请直接说，比如“{example}”。"
        return (
            f"That sounds like a question, so I ran nothing. To have it done, just say so, e.g. “{example}”."
        )

    def no_job(self) -> str:
        return "现在没有正在运行的任务。" if self.zh else "There is no running job to do that to."

    def nothing_pending(self) -> str:
        if self.zh:
            return "现在没有等你确认的操作，所以什么都没有执行。"
        return "Nothing is waiting for your confirmation, so I ran nothing."

    def status(self, status: str) -> str:
        return ZH_STATUS.get(status, status) if self.zh else status.replace("_", " ")

    def result(self, name: str, result: dict[str, Any]) -> str:
        task = name.replace("__", ".")
        status = str(result.get("status", "?"))
        message = str(result.get("message") or "")
        eid = result.get("execution_id", "")
        if status == "running":
            if self.zh:
                return f"{task} 已在后台运行（任务号 {eid}）。"
            return f"{task} is running in the background (job {eid})."
        if status == "completed":
            return f"{task}：{message}" if self.zh else f"{task}: {message}"
        if self.zh:
            return f"{task} {self.status(status)}：{self._zh_reason(result, message)}"
        return f"{task} {status}: {message}"

    def _zh_reason(self, result: dict[str, Any], message: str) -> str:
        """The executor's own refusals, said in Chinese (a task's own words stay as it wrote them)."""
        data = result.get("data") or {}
        if data.get("blocked_by"):
            blocker = f"{data['blocked_by']}（{data.get('blocking_task') or '?'}）"
            return f"资源 {data.get('resource', '?')} 正被任务 {blocker}占用，先停止它或等它结束"
        if data.get("resource") and "in use" in message:
            return f"资源 {data['resource']} 正被一个你看不到的任务占用"
        if data.get("unmet"):
            return f"条件不满足：{message}"
        if data.get("allowed"):
            return f"参数不对，可选值：{'、'.join(map(str, data['allowed']))}（{message}）"
        return message

    def job(self, result: dict[str, Any]) -> str:
        """A control tool's answer: the job's state, in words."""
        data = result.get("data") or {}
        progress = data.get("progress") or {}
        fraction = progress.get("fraction")
        task, status, eid = (
            result.get("task_id", "?"),
            str(result.get("status", "?")),
            result.get("execution_id", ""),
        )
        if self.zh:
            text = f"任务 {task}（{eid}）{self.status(status)}"
            if isinstance(fraction, int | float):
                text += f"，进度 {fraction:.0%}"
            if status != "running" and result.get("message"):
                said = _without_status(str(result.get("message")), status)
                said = re.sub(r"^asked by (?:the )?([\w.-]+)", r"由 \1 要求", said).replace("; ", "；")
                text += f"：{said}"
            return text + "。"
        text = f"Job {task} ({eid}) is {self.status(status)}"
        if progress.get("message"):
            text += f": {progress['message']}"
        elif isinstance(fraction, int | float):
            text += f", {fraction:.0%} done"
        if status != "running" and result.get("message"):
            text += f": {_without_status(str(result.get('message')), status)}"
        return text.rstrip(".") + "."

    def halted(self) -> str:
        return "因此我没有继续后面的步骤。" if self.zh else "So I did not go on with the remaining steps."

    def cancelled(self) -> str:
        return "好的，已取消，什么都没有执行。" if self.zh else "OK, cancelled: nothing was run."

    def nothing(self) -> str:
        return "请告诉我要做什么。" if self.zh else "Tell me what to do."

    def too_many(self, parts: int) -> str:
        if self.zh:
            return (
                f"这条消息分成了 {parts} 段，离线规划器一次最多安排 {MAX_PARTS} 件事，所以我什么都没有执行。"
                "请分几次说。"
            )
        return (
            f"This message has {parts} parts and the offline planner takes at most {MAX_PARTS} at a time, "
            "so I ran nothing. Please ask in a few messages."
        )

    def too_long(self, size: int) -> str:
        if self.zh:
            return (
                f"这条消息有 {size} 个字符，离线规划器最多读 {MAX_REQUEST_CHARS} 个，所以我什么都没有执行。"
                "请把要做的事说得短一些。"
            )
        return (
            f"This message is {size} characters long and the offline planner reads at most "
            f"{MAX_REQUEST_CHARS}, so I ran nothing. Please say what to do in fewer words."
        )


# -- the model ---------------------------------------------------------------------------------


class OfflineModel:
    name = "offline"
    supports_tools = True

    def __init__(self, language: str | None = None) -> None:
        self.language = language

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], *, context: TurnContext | None = None
    ) -> ModelResponse:
        # Reading a long request is real CPU work: off the event loop, which may be serving a page.
        return await asyncio.to_thread(self.decide, messages, tools, context or TurnContext())

    def decide(
        self, messages: Sequence[Message], tools: Sequence[ToolDef], context: TurnContext
    ) -> ModelResponse:
        """``complete``'s answer, computed on the calling thread."""
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        anchor = users[-1] if users else -1
        request = str(messages[anchor].get("content") or "") if anchor >= 0 else ""
        if not tools:
            if context.formats_question is not None:  # the session asks which files a request calls for
                chosen = offline_docs.formats_in_words(context.formats_question)
                return ModelResponse(text=json.dumps({"formats": list(chosen)}), model=self.name)
            return ModelResponse(text=self._review(context.review), model=self.name)
        if context.answer is False:
            # Said in the language of the request that led to the question, not of "no".
            asked = str(messages[users[-2]].get("content") or "") if len(users) >= 2 else request
            return ModelResponse(text=Texts(self._zh(asked)).cancelled(), model=self.name)
        if context.answer is True and len(users) >= 2:
            # The person confirmed a call: carry on with the request that led to it.
            anchor = users[-2]
            request = str(messages[anchor].get("content") or "")
        elif context.stray_answer:
            return ModelResponse(text=Texts(self._zh(request)).nothing_pending(), model=self.name)
        else:
            request = _with_clarifications(messages, users, request)
        if len(request) > MAX_REQUEST_CHARS:  # what it reads is bounded, so its time is too
            return ModelResponse(text=Texts(self._zh(request)).too_long(len(request)), model=self.name)
        researched = offline_docs.respond(request, messages, anchor, tools, context, self._zh(request))
        if researched is not None:  # research and documents: planned from the results so far
            return researched
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
        says = [step.say for step in plan if step.say]
        if says:  # not sure of every part: nothing runs
            return self._final(calls, texts, extra=says[:1], kinds=kinds)
        done = len(calls)
        if done < len(plan):
            step = plan[done]
            assert step.tool is not None
            if step.unresolved is not None:
                return self._final(calls, texts, extra=[step.unresolved], kinds=kinds)
            call = ToolCall(id=f"offline_{done}", name=step.tool, arguments=step.args)
            return ModelResponse(tool_calls=(call,), model=self.name)
        return self._final(calls, texts, extra=[] if calls else [texts.nothing()], kinds=kinds)

    def _zh(self, request: str) -> bool:
        if self.language is not None:
            return self.language == "zh"
        return has_cjk(request)

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
        """The calls ``request`` asks for, in order; or one step that says why nothing will run."""
        texts = Texts(self._zh(request))
        text = reorder(fold(request)).strip(" .!?！？。")
        if not text:
            return [Step(say=texts.nothing())]
        if ABILITY.search(text):
            return [Step(say=texts.abilities(tools))]
        if HYPOTHETICAL.search(text):
            return [Step(say=texts.hypothetical(tools))]
        question = _state_question(text)
        if question is not None:
            return self._answer_question(question, tools, messages, open_jobs, texts)
        parts: list[Part] = []
        carried: Part | None = None
        raws = [piece for raw in _split(text) for piece in _by_tools(raw, tools)]
        if len(raws) > MAX_PARTS:
            return [Step(say=texts.too_many(len(raws)))]
        for index, raw in enumerate(raws):
            part = self._read(raw, tools)
            if part is None:
                continue
            if carried is not None:
                part = _combine(carried, part)
                carried = None
            # "三星和四星都分解了", "金币和经验都刷三次": values before their tool go with it.
            if part.tool is None and part.has_values and not parts and index + 1 < len(raws):
                carried = part
                continue
            parts.append(part)
        if carried is not None:
            parts.append(carried)
        if not parts:
            return [Step(say=texts.nothing())]
        steps: list[Step] = []
        previous: Step | None = None
        for part in parts:
            made = self._steps(part, previous, tools, messages, open_jobs, texts)
            if made and made[0].say is not None:
                return made[:1]
            if made and steps and made[0].extends:
                steps[-1] = made[0]
                made = made[1:]
            steps.extend(made)
            previous = steps[-1] if steps else None
        by_name = {tool.name: tool for tool in tools}
        for step in steps:  # only now: a later part may have given what an earlier one lacked
            tool = by_name.get(step.tool or "")
            if tool is not None and tool.kind == "business":
                question = self._missing(tool, step.args, texts)
                if question is not None:
                    return [question]
        return steps

    def _read(self, text: str, tools: Sequence[ToolDef]) -> Part | None:
        reading = Reading(text)
        if not reading.tokens:
            return None
        part = Part(text=text)
        explicit = EXECUTION_ID.search(text)
        if explicit:
            part.execution_id = explicit.group(0)
            reading.take_chars(explicit.start(), explicit.end())
        best: tuple[int, int, ToolDef, str] | None = None
        for tool in tools:
            for word in _tool_words(tool):
                score = reading.score(word)
                if score and (best is None or (score, tool.kind == "control") > (best[0], best[1])):
                    best = (score, int(tool.kind == "control"), tool, word)
        for word in sorted(BACKGROUND_WORDS, key=len, reverse=True):
            if best is not None and stems(word) == stems(best[3]):
                continue
            if reading.find(word):
                part.background = True
                if best is None or not _contains_word(best[3], word):
                    reading.take(word)
        if best is not None:
            part.tool = best[2]
            reading.take(best[3])
        # Catalog values of every tool: the part may name a value before (or without) its tool.
        candidates = [part.tool] if part.tool is not None else [t for t in tools if t.kind == "business"]
        for tool in candidates:
            self._values(reading, tool, part)
        for count in counts(text):
            reading.take_chars(count.start, count.end)
            part.numbers.append(count.value)
            part.kinds.append(count.kind)
        part.reading = reading
        part.candidates = candidates
        return part

    def _understood(self, part: Part, tool: ToolDef | None) -> list[str]:
        """The words of ``part`` not understood once ``tool`` is known: the words that only restate
        the tool or a value found ("刷金币副本", "the crimson calyx", "四星遗器") are understood."""
        reading = part.reading
        assert reading is not None
        vocab: set[str] = set()
        if tool is not None:
            for word in [*_tool_words(tool), *(v for m in tool.labels.values() for v in m.values())]:
                vocab.update(stems(word))
        for owner in [tool] if tool is not None else part.candidates:
            for name, words in owner.value_words.items():
                for canonical in part.values.get(name, ()):
                    for word in (canonical, *words.get(canonical, ())):
                        vocab.update(stems(word))
            for name, parent, canonical, _ in part.scoped:
                scoped = owner.scoped_words.get(name, {}).get(parent, {})
                for word in (canonical, *scoped.get(canonical, ())):
                    vocab.update(stems(word))
                parents = owner.value_words.get(owner.depends_on.get(name, ""), {})
                for word in (parent, *parents.get(parent, ())):
                    vocab.update(stems(word))
        for index, token in enumerate(reading.tokens):
            if not reading.used[index] and token.stem in vocab and token.text not in NEGATIONS:
                reading.used[index] = True
        part.residue = _residue(reading)
        return part.residue

    def _values(self, reading: Reading, tool: ToolDef, part: Part) -> None:
        """Catalog values, longest words first; a word taken by a longer one is not read again
        ("霜风" is not also "风"). A word two parents share is kept under both: the caller asks."""
        owners: dict[str, list[tuple[str, str | None, str]]] = {}
        for name, words in tool.value_words.items():
            for canonical, aliases in words.items():
                for word in (canonical, *aliases):
                    owners.setdefault(word, []).append((name, None, canonical))
        for name, scoped in tool.scoped_words.items():
            for parent_value, words in scoped.items():
                for canonical, aliases in words.items():
                    for word in (canonical, *aliases):
                        owners.setdefault(word, []).append((name, parent_value, canonical))
        found: list[tuple[int, str, str | None, str, int]] = []
        for word in sorted(owners, key=lambda w: _weight(w), reverse=True):
            spans = reading.find(word)
            if not spans:
                continue
            reading.take(word)
            length = _weight(word)
            for name, parent, canonical in dict.fromkeys(owners[word]):
                found.append((spans[0][0], name, parent, canonical, length))
        for _, name, parent, canonical, length in sorted(found):
            if parent is None:
                values = part.values.setdefault(name, [])
                if canonical not in values:
                    values.append(canonical)
            elif (name, parent, canonical) not in [(n, p, c) for n, p, c, _ in part.scoped]:
                part.scoped.append((name, parent, canonical, length))

    def _steps(
        self,
        part: Part,
        previous: Step | None,
        tools: Sequence[ToolDef],
        messages: Sequence[Message],
        open_jobs: Sequence[OpenJob] | None,
        texts: Texts,
    ) -> list[Step]:
        tool = part.tool
        inherited: dict[str, Any] = {}
        continues = previous is not None and previous.tool is not None
        if tool is None and continues and part.has_values:
            assert previous is not None
            tool = next((t for t in tools if t.name == previous.tool), None)
            inherited = dict(previous.args)
        elif tool is None:
            tool = _tool_by_values(part, tools)
        residue = self._understood(part, tool)
        if residue:
            guess = _guess(part, tools)
            if guess is not None:
                return [Step(say=texts.did_you_mean(guess))]
            if tool is None:
                return [Step(say=texts.cannot(part.text, tools))]
            return [Step(say=texts.unsure(residue, part.text))]
        if tool is None:
            if not (part.has_values or part.background):
                return []  # only small words: nothing asked here
            return [Step(say=texts.cannot(part.text, tools))]
        if part.tool is None and inherited and part.numbers and not (part.values or part.scoped):
            assert previous is not None
            if not _count_missing(previous, tool):
                # "…3 times, 5 times": a second count for a step that has one
                return [Step(say=texts.unsure([str(n) for n in part.numbers], part.text))]
        elif part.tool is not None and previous is not None and previous.tool == tool.name:
            if part.numbers and not (part.values or part.scoped) and _count_missing(previous, tool):
                inherited = dict(previous.args)  # "刷一下金币，刷三次": the count of the same step
        if part.background and not tool.background:
            tool = _background_variant(tool, tools) or tool
        if tool.kind == "control":
            return [self._control(tool, part, messages, open_jobs, texts)]
        return self._arguments(tool, part, inherited, texts)

    def _control(
        self,
        tool: ToolDef,
        part: Part,
        messages: Sequence[Message],
        open_jobs: Sequence[OpenJob] | None,
        texts: Texts,
    ) -> Step:
        eid = part.execution_id or _latest_job(messages, open_jobs)
        if eid is None:
            return Step(tool=tool.name, unresolved=texts.no_job())
        return Step(tool=tool.name, args={"execution_id": eid})

    def _arguments(self, tool: ToolDef, part: Part, inherited: dict[str, Any], texts: Texts) -> list[Step]:
        props: dict[str, Any] = dict(tool.parameters.get("properties", {}))
        base: dict[str, Any] = {}
        variants: list[tuple[str, list[Any]]] = []
        for name, values in part.values.items():
            if name not in props:
                continue
            if len(values) == 1:
                base[name] = values[0]
            else:
                variants.append((name, values))
        for name in {s[0] for s in part.scoped}:
            if name not in props:
                continue
            parent = tool.depends_on[name]
            fixed = base.get(parent) or (None if parent in part.values else inherited.get(parent))
            matches = [s for s in part.scoped if s[0] == name and (fixed is None or s[1] == fixed)]
            if not matches:
                allowed = list(tool.scoped_words[name].get(str(fixed), {}))
                return [Step(say=texts.which(_label(tool, name, texts.zh), allowed))]
            ordered: list[tuple[str, str]] = []
            for _, parent_value, canonical, _ in matches:
                if (parent_value, canonical) not in ordered:
                    ordered.append((parent_value, canonical))
            names = [c for _, c in ordered]
            if len(set(names)) != len(names):  # one word, two parents: which kind is meant?
                return [
                    Step(say=texts.which(_label(tool, parent, texts.zh), sorted({p for p, _ in ordered})))
                ]
            if len(ordered) == 1:
                base.setdefault(parent, ordered[0][0])
                base[name] = ordered[0][1]
            else:
                variants.append((f"{parent}\x00{name}", list(ordered)))
        int_params = [n for n, p in props.items() if _is_int(p) and n not in base]
        enum_ints = [n for n in int_params if props[n].get("enum") or _enum_of(props[n])]
        counts_of = [n for n in int_params if n not in enum_ints]  # how many times: attempts, rounds
        # "两次" says how often: only a count takes it, never a choice such as a rarity.
        times = [v for v, kind in zip(part.numbers, part.kinds, strict=True) if kind == "times"]
        others = [v for v, kind in zip(part.numbers, part.kinds, strict=True) if kind != "times"]
        if len(others) > 1 and len(enum_ints) == 1:
            variants.append((enum_ints[0], others))  # "三星和四星": one call per value
            enum_ints, others = [], []
        for name in counts_of:
            if times:
                base[name] = times.pop(0)
        for name in [*enum_ints, *(n for n in counts_of if n not in base)]:
            if others:
                base[name] = others.pop(0)
        if times or others:
            return [Step(say=texts.unsure([str(n) for n in (*times, *others)], part.text))]
        if len(variants) > 1:
            return [Step(say=texts.unsure([v for _, vs in variants for v in map(str, vs)], part.text))]
        args = {**{k: v for k, v in inherited.items() if k in props}, **base}
        if inherited and variants:
            # A different value of the same parameter replaces the inherited one, and what depends on it.
            key = variants[0][0].split("\x00")[-1]
            args.pop(key, None)
        choices: list[dict[str, Any]] = []
        if variants:
            key, values = variants[0]
            for value in values:
                if "\x00" in key:
                    parent, name = key.split("\x00")
                    choices.append({**args, parent: value[0], name: value[1]})
                else:
                    choices.append({**args, key: value})
        else:
            choices.append(args)
        extends = (
            bool(inherited)
            and len(choices) == 1
            and all(choices[0].get(k) == v for k, v in inherited.items() if k in props)
        )
        return [Step(tool=tool.name, args=chosen, extends=extends) for chosen in choices]

    def _missing(self, tool: ToolDef, args: dict[str, Any], texts: Texts) -> Step | None:
        props: dict[str, Any] = dict(tool.parameters.get("properties", {}))
        required = set(tool.parameters.get("required", []))
        for name in props:
            if name in args or name not in required:
                continue
            label = _label(tool, name, texts.zh)
            if name in tool.depends_on:
                parent = tool.depends_on[name]
                if parent in args:
                    return Step(say=texts.which(label, list(tool.scoped_words[name][args[parent]])))
                return Step(say=texts.which(_label(tool, parent, texts.zh), list(tool.scoped_words[name])))
            allowed = props[name].get("enum") or _enum_of(props[name])
            if allowed:
                return Step(say=texts.which(label, [str(v) for v in allowed]))
            return Step(say=texts.which(label, [props[name].get("description", name)]))
        return None

    def _answer_question(
        self,
        text: str,
        tools: Sequence[ToolDef],
        messages: Sequence[Message],
        open_jobs: Sequence[OpenJob] | None,
        texts: Texts,
    ) -> list[Step]:
        job = _latest_job(messages, open_jobs)
        status_tool = _status_tool(tools)
        about_job = any(fold(w) in text for w in PROGRESS_WORDS) or EXECUTION_ID.search(text)
        control = next((t for t in tools if t.kind == "control" and t.name.endswith("status")), None)
        if control is not None and (job is not None and (about_job or status_tool is None)):
            explicit = EXECUTION_ID.search(text)
            return [Step(tool=control.name, args={"execution_id": explicit.group(0) if explicit else job})]
        if status_tool is not None:
            return [Step(tool=status_tool.name, args={})]
        return [Step(say=texts.no_job())]


# -- helpers -----------------------------------------------------------------------------------


def _split(text: str) -> list[str]:
    """The parts of a request in the order they are to be done."""
    parts: list[str] = []
    for sentence in re.split(r"[。!！;；]", text):
        pieces = REVERSE.split(sentence, maxsplit=1)
        if len(pieces) == 2:
            pieces = [pieces[1], pieces[0]]  # "close the game after farming" = farm, then close
        for piece in pieces:
            parts += [p.strip(" .?？") for p in SPLIT.split(piece) if p and p.strip(" .?？")]
    return parts


def _state_question(text: str) -> str | None:
    """The question, when the request asks about state rather than for an action."""
    stripped = text.strip()
    if POLITE_OPENER.match(stripped):
        return None  # "can you start the game?", "能帮我开游戏吗": a request, politely
    if QUESTION_EN.match(stripped) or QUESTION_ZH.search(stripped):
        return stripped
    if any(fold(w) == stripped.rstrip("?？ ") for w in PROGRESS_WORDS):
        return stripped
    return None


def _without_status(message: str, status: str) -> str:
    """ "stopped (asked by the agent): stopped after 3 rounds" said after "is stopped": the rest only."""
    rest = message.removeprefix(status).strip() if message.startswith(status) else message
    why = re.match(r"^\((.*?)\):\s*(.*)$", rest)
    return f"{why.group(1)}; {why.group(2)}" if why else rest.lstrip(": ")


def _by_tools(text: str, tools: Sequence[ToolDef]) -> list[str]:
    """``text`` cut before each business tool it names after the first ("进游戏刷两把经验书",
    "每日任务做完了就退出游戏"): two requests written without a connective. A background variant of
    the same work ("挂机刷钱") and a control word over a task word ("stop farming") stay one request."""
    reading = Reading(text)
    found: list[tuple[int, int, int, ToolDef]] = []
    words = [(w, t) for t in tools if t.kind == "business" for w in _tool_words(t)]
    taken = bytearray(len(reading.tokens))  # tokens a longer word already claimed: overlap checks stay linear
    for word, tool in sorted(words, key=lambda wt: _weight(wt[0]), reverse=True):
        for i, j in reading.find(word):
            if not any(taken[i:j]):
                taken[i:j] = b"\1" * (j - i)
                found.append((i, j, len(fold(word)), tool))
    found.sort(key=lambda f: f[0])
    if any(t.kind == "control" and reading.find(w) for t in tools for w in _tool_words(t)):
        return [text]
    cuts: list[int] = []
    for (_, _, _, before), (start, _, _, tool) in itertools.pairwise(found):
        if tool.name == before.name or _background_variant(before, tools) is tool:
            continue
        if _background_variant(tool, tools) is before:
            continue
        cuts.append(reading.tokens[start].start)
    if not cuts:
        return [text]
    bounds = [0, *cuts, len(text)]
    return [text[a:b].strip() for a, b in itertools.pairwise(bounds) if text[a:b].strip()]


def _combine(first: Part, second: Part) -> Part:
    """``first`` (values with no tool) read as the start of ``second``."""
    assert first.reading is not None and second.reading is not None
    reading = Reading(f"{first.text} {second.text}")
    reading.used = [*first.reading.used, *second.reading.used]
    values = {k: list(v) for k, v in first.values.items()}
    for name, more in second.values.items():
        values.setdefault(name, [])
        values[name] += [v for v in more if v not in values[name]]
    return Part(
        text=reading.text,
        tool=second.tool,
        values=values,
        scoped=[*first.scoped, *(s for s in second.scoped if s not in first.scoped)],
        numbers=[*first.numbers, *second.numbers],
        kinds=[*first.kinds, *second.kinds],
        background=first.background or second.background,
        execution_id=second.execution_id or first.execution_id,
        reading=reading,
        candidates=second.candidates,
    )


def _contains_word(alias: str, word: str) -> bool:
    a, w = stems(alias), stems(word)
    return any(a[i : i + len(w)] == w for i in range(len(a) - len(w) + 1))


def _count_missing(step: Step, tool: ToolDef | None) -> bool:
    """``step`` has no count yet (an int parameter that is not a choice among values, like rarity)."""
    props: dict[str, Any] = dict(tool.parameters.get("properties", {})) if tool is not None else {}
    for name, value in step.args.items():
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        prop = props.get(name, {})
        if not (prop.get("enum") or _enum_of(prop)):
            return False
    return True


def _tool_by_values(part: Part, tools: Sequence[ToolDef]) -> ToolDef | None:
    """The one tool whose catalog the part's values belong to ("金币副本 3 次")."""
    params = set(part.values) | {s[0] for s in part.scoped}
    owners = [
        t
        for t in tools
        if t.kind == "business" and params and params <= (set(t.value_words) | set(t.scoped_words))
    ]
    preferred = [t for t in owners if t.background == part.background] or owners
    return preferred[0] if len(preferred) == 1 or (preferred and not part.background) else None


def _background_variant(tool: ToolDef, tools: Sequence[ToolDef]) -> ToolDef | None:
    """The background tool that takes the same catalog values ("keep farming gold" → loop_farm)."""
    mine = set(tool.value_words) | set(tool.scoped_words)
    for other in tools:
        if (
            other.background
            and other.kind == "business"
            and mine
            and mine <= (set(other.value_words) | set(other.scoped_words))
        ):
            return other
    return None


def _guess(part: Part, tools: Sequence[ToolDef]) -> str | None:
    """What the person probably typed ("strat the game" → "start the game", "farm gld" → "farm gold"):
    the whole part close to one known phrase, or each word not understood close to one known word."""
    phrases: set[str] = set()
    for tool in tools:
        phrases.update(fold(w) for w in _tool_words(tool))
        for mapping in [
            *tool.value_words.values(),
            *(m for s in tool.scoped_words.values() for m in s.values()),
        ]:
            for canonical, aliases in mapping.items():
                phrases.update(fold(w) for w in (canonical, *aliases))
    phrases = {p for p in phrases if len(p) >= 2}

    def closest(probe: str, pool: set[str], cutoff: float) -> str | None:
        close = difflib.get_close_matches(probe, sorted(pool), n=1, cutoff=cutoff)
        return close[0] if close else None

    whole = closest(part.text, phrases, 0.75)
    if whole is not None:
        return whole
    words = {w for p in phrases for w in p.split() if len(w) >= 3 and not has_cjk(w)}
    corrected = part.text
    for unknown in part.residue:
        if has_cjk(unknown) or len(unknown) < 3:
            return None
        word = closest(unknown, words, 0.75)
        if word is None:
            return None
        corrected = re.sub(rf"\b{re.escape(unknown)}\b", word, corrected)
    return corrected if corrected != part.text else None


def _with_clarifications(messages: Sequence[Message], users: list[int], request: str) -> str:
    """The request with the earlier ones it answers: when the last reply was a question (and ran
    nothing), the person's new words complete the request that led to it ("刷副本" … "金币")."""
    combined = request
    position = len(users) - 1
    while position > 0 and len(users) - position <= 3:
        between = messages[users[position - 1] + 1 : users[position]]
        if any(m.get("role") == "tool" for m in between) or not between:
            break
        reply = str(between[-1].get("content") or "").strip()
        if between[-1].get("role") != "assistant" or not reply.endswith(("？", "?", "。")):
            break
        if not any(mark in reply for mark in ("选哪一个", "Which ", "Allowed:", "可选")):
            break
        combined = f"{messages[users[position - 1]].get('content') or ''}，{combined}"
        position -= 1
    return combined


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


__all__ = ["OfflineModel", "Step", "Texts", "numbers_in", "zh_number"]
