"""What tether itself says in a turn, in the person's language.

The loop writes a few answers on its own: when a turn's step budget is spent, when the model repeats a
call that did not complete, when a business call failed and the model asked for more, and the question
that asks the person to confirm a call. They follow the language of the person's message (Chinese when
it has a CJK ideograph), else ``[agent].language``; the model's own words are never rewritten here.
"""

from __future__ import annotations

from tether.models.base import ToolCall
from tether.tasks.result import TaskResult


def zh(message: str, language: str) -> bool:
    """Whether tether's own words are Chinese: the person's message decides, else the setting."""
    if message:
        return any("\u4e00" <= ch <= "\u9fff" for ch in message)
    return language == "zh"


def answer_word(approve: bool, *, zh: bool) -> str:
    """A button's answer, recorded as the person's message in the language of the request it answers (a
    Chinese conversation showed an English "yes", and a "no" there was declined in English)."""
    if zh:
        return "是" if approve else "否"
    return "yes" if approve else "no"


def budget_text(used: int, *, zh: bool) -> str:
    if zh:
        return f"已用完本轮的 {used} 步预算，我先停在这里。"
    return f"I used this turn's budget of {used} steps and stopped here."


def repeated_text(call: ToolCall, result: TaskResult, *, zh: bool) -> str:
    why = result.message or result.status.value
    if zh:
        status = result.status.value
        return f"模型两次发出同一个调用 {call.name}，两次都是 {status}（{why}），所以我停下了这一轮。"
    return (
        f"The model made the same call to {call.name} twice and it was {result.status.value} both times "
        f"({why}), so I stopped this turn."
    )


def failure_text(result: TaskResult, *, zh: bool) -> str:
    if zh:
        return f"{result.task_id} {result.status.value}：{result.message}。本轮不再继续执行其他任务。"
    outcome = f"{result.task_id} {result.status.value}: {result.message}."
    return f"{outcome} I did not run anything else this turn."


def confirmation_question(
    task_id: str, shown: str, impact: str | None, *, destructive: bool, zh: bool
) -> str:
    """The question that asks the person to confirm ``task_id`` with the arguments ``shown``; ``impact``
    is what the call would touch, measured as the person is asked."""
    call = call_described(task_id, shown, impact, destructive=destructive, zh=zh)
    return f"{call}确认执行吗？请回答“是”或“否”。" if zh else f"{call} Do you confirm? Answer yes or no."


def call_described(task_id: str, shown: str, impact: str | None, *, destructive: bool, zh: bool) -> str:
    """What a confirmation shows of the call, ending with a full stop: the task, how dangerous, its
    arguments, and what it would touch (every interface that asks a person says it this way)."""
    if zh:
        kind = "破坏性操作" if destructive else "需要谨慎的操作"
        said = f"：{impact}" if impact else ""
        return f"{task_id} 是{kind}（参数 {shown}）{said}。"
    kind = "destructive" if destructive else "a caution task"
    said = f": {impact}" if impact else ""
    return f"{task_id} is {kind} (arguments {shown}){said}."


def delegated_question(agent: str, question: str, *, zh: bool) -> str:
    """A sub-agent's question, asked in the thread the person is looking at: who asks, then the call."""
    if zh:
        return f"（由 {agent} 提出）{question}"
    return f"({agent} asks) {question}"


def declined_text(*, zh: bool) -> str:
    """How a sub-agent's turn ends when the person said no to its call: it does nothing more."""
    if zh:
        return "对方拒绝了这次调用（declined）：没有执行，也没有再做别的。"
    return "declined by the person: the call did not run, and nothing more was done"
