"""What the offline planner says, in Chinese or English (research and documents word theirs in offline_docs).

It owns the wording and nothing else: the questions it asks when a request is incomplete or unclear
("which one?", "did you mean …?"), why it ran nothing, what it can do, a task's result and a job's state
in words (the executor's own refusals said in Chinese), and the localized label of a parameter. The
planner (``offline_choosing``) and the model (``offline``) decide when each is said; the person's own
words are quoted back, cut short, never a page.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tether.models import offline_answers as answers
from tether.models.base import ToolDef
from tether.models.offline_reading import MAX_PARTS, MAX_REQUEST_CHARS
from tether.models.understand import has_cjk

QUOTE_CHARS = 60  # of the person's own words quoted back: enough to recognise them, never a page
QUOTE_WORDS = 6
SHORT_LIST = 4  # example sentences after "I can't": a taste, the rest is one question away
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


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1].rstrip() + "…"


def param_label(tool: ToolDef, param: str, zh: bool) -> str:
    """``param`` as the person reads it: the tool's label in their language, else its own name."""
    labels = tool.labels.get(param, {})
    if zh and labels.get("zh"):
        return labels["zh"]
    return labels.get("en") or param.replace("_", " ")


class Texts:
    """Every reply, in Chinese when ``zh``, else in English."""

    def __init__(self, zh: bool) -> None:
        self.zh = zh

    def which(self, label: str, allowed: Sequence[str]) -> str:
        if self.zh:
            return f"请问{label}选哪一个？可选：{'、'.join(allowed)}。我还什么都没有执行。"
        return f"Which {label}? Allowed: {', '.join(allowed)}. I have not run anything yet."

    def what(self, label: str, hint: str) -> str:
        """The question for a free value (a path, a text): what it is, with the tool's own hint."""
        if self.zh:  # the hint is the tool's English description: only its example is shown
            example = re.search(r"e\.g\.\s*([^)\s]+)", hint)
            shown = f"（比如 {example.group(1)}）" if example else ""
            return f"请告诉我{label}{shown}。我还什么都没有执行。"
        return f"Which {label}? ({hint}) I have not run anything yet."

    def cannot(self, part: str, tools: Sequence[ToolDef]) -> str:
        part = _quote(part)
        said = self._examples(tools, SHORT_LIST)
        if self.zh:
            return (
                f"我做不到“{part}”：没有对应的工具，所以什么都没有执行。我能做的有：{said}等；"
                "问我“你能做什么”可以看全部。"
            )
        return (
            f"I can't do “{part}”: none of my tools does that, so I ran nothing. I can: {said} and more; "
            "ask “what can you do?” for the rest."
        )

    def cannot_answer(self, question: str) -> str:
        """A question none of the tools knows anything about (the weather): nothing is run."""
        question = _quote(question)
        if self.zh:
            return f"我没法回答“{question}”：我的工具里没有能查这个的，所以什么都没有执行。"
        return f"I can't answer “{question}”: none of my tools knows that, so I ran nothing."

    def near(self, part: str, offers: Sequence[tuple[ToolDef, str, Sequence[str]]]) -> str:
        """A request that names no tool but comes close to some: each with what it needs and a sentence
        to say. ``offers``: (tool, the label of a value it still needs or "", the values allowed)."""
        part = _quote(part)
        items = []
        for tool, label, allowed in offers:
            item = f"“{answers.example(tool, self.zh)}”"
            needs = []
            if label and allowed:
                needs.append(
                    f"要说{label}：{'、'.join(allowed)}"
                    if self.zh
                    else f"say which {label}: {', '.join(allowed)}"
                )
            elif label:
                needs.append(f"要说{label}" if self.zh else f"say the {label}")
            if tool.danger == "destructive":  # it asks before it runs
                needs.append("需要你确认" if self.zh else "asks you first")
            if needs:
                item += f"（{'，'.join(needs)}）" if self.zh else f" ({'; '.join(needs)})"
            items.append(item)
        if self.zh:
            return f"“{part}”我没法直接照做。相关的我能做：{'；'.join(items)}。我还什么都没有执行。"
        closest = "; ".join(items)
        return f"I can't do “{part}” as it stands. Closest I can do: {closest}. I have not run anything yet."

    def values(self, tool: ToolDef, label: str, allowed: Sequence[str]) -> str:
        """The values a parameter allows, asked for as a question ("有哪些副本可以刷？")."""
        say = answers.example(tool, self.zh)
        lines = "\n".join(f"- {value}" for value in allowed)
        if self.zh:
            return f"{label}可以选这些：\n{lines}\n比如说“{say}”。"
        return f"The {label} can be one of:\n{lines}\nFor example, say “{say}”."

    def facts(self, lines: Sequence[str]) -> str:
        return ("；".join(lines) + "。") if self.zh else ("; ".join(lines) + ".")

    def no_jobs(self) -> str:
        return "现在没有正在运行的后台任务。" if self.zh else "No background job is running right now."

    def unknown_value(self, words: Sequence[str], label: str, allowed: Sequence[str]) -> str:
        """A value the tool does not know ("打扫阁楼"): the ones it does."""
        if all(has_cjk(word) and len(word) == 1 for word in words):
            words = ["".join(words)]  # Chinese is read a character at a time: "阁" "楼" was "阁楼"
        shown = "”“".join(_quote(word) for word in words[:QUOTE_WORDS])
        if self.zh:
            return f"我不认识“{shown}”。{self.which(label, allowed)}"
        return f"I don't know “{shown}”. {self.which(label, allowed)}"

    def _examples(self, tools: Sequence[ToolDef], limit: int | None = None) -> str:
        business = [t for t in tools if t.kind == "business"]
        # Safe, quick work first: an example is something to try, not something to regret.
        business.sort(key=lambda t: (t.danger != "safe", t.background))
        quoted = [f"“{answers.example(t, self.zh)}”" for t in business[:limit]]
        return ("、" if self.zh else ", ").join(quoted)

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
        """What it can do, in plain words: a sentence to say for each tool."""
        lines = []
        for tool in tools:
            if tool.kind != "business":
                continue
            note = ""
            if tool.danger == "destructive":
                note = "（需要你确认）" if self.zh else " (asks you first)"
            elif tool.background:
                note = (
                    "（在后台运行，说“停下”就停）"
                    if self.zh
                    else " (runs in the background until you say stop)"
                )
            say = f"“{answers.example(tool, self.zh)}”"
            if self.zh:
                lines.append(f"- {say}{note}")
            else:
                lines.append(f"- {_summary(tool.description)}: {say}{note}")
        shown = "\n".join(lines)
        if self.zh:
            return f"我能帮你做这些事，直接这样说就行：\n{shown}\n后台任务可以问“进度怎么样”，或者说“停下”。"
        return (
            f"Here is what I can do; just say it, for example:\n{shown}\n"
            "For a background job, ask “how is it going?” or say “stop”."
        )

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
        return "现在没有正在运行的后台任务。" if self.zh else "There is no running job to do that to."

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


def _summary(description: str) -> str:
    """A tool's description cut to its first clause ("Start the game (does nothing if …)." → "Start
    the game")."""
    plain = re.sub(r"\s*\([^)]*\)", "", description.strip())
    return re.split(r"(?<=[a-z])\.\s|:\s|;\s", plain, maxsplit=1)[0].rstrip(".")


def _without_status(message: str, status: str) -> str:
    """ "stopped (asked by the agent): stopped after 3 rounds" said after "is stopped": the rest only."""
    rest = message.removeprefix(status).strip() if message.startswith(status) else message
    why = re.match(r"^\((.*?)\):\s*(.*)$", rest)
    return f"{why.group(1)}; {why.group(2)}" if why else rest.lstrip(": ")
