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
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.models import offline_docs
from tether.models.base import BudgetReview, Message, ModelResponse, OpenJob, ToolCall, ToolDef, TurnContext
from tether.models.offline_reading import (
    ABILITY,
    EXECUTION_ID,
    HYPOTHETICAL,
    MAX_PARTS,
    MAX_REQUEST_CHARS,
    PROGRESS_WORDS,
    Part,
    background_variant,
    by_tools,
    combine,
    likely_meaning,
    read_part,
    split,
    state_question,
    understood,
)
from tether.models.offline_texts import Texts, param_label
from tether.models.understand import fold, has_cjk, reorder
from tether.models.understand import numbers_in as numbers_in
from tether.models.understand import zh_number as zh_number

OK_STATUSES = ("completed", "running")


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    say: str | None = None  # a question or an explanation instead of a call: nothing runs
    # Said instead of making the call if it is still unresolved when its turn comes (no job to stop).
    unresolved: str | None = None
    # This step completes the one before it (a later part only added arguments): it replaces it.
    extends: bool = False


def _status_tool(tools: Sequence[ToolDef]) -> ToolDef | None:
    for tool in tools:
        if tool.kind == "business" and (
            tool.name.endswith("status") or any(fold(a) in ("status", "状态") for a in tool.aliases)
        ):
            return tool
    return None


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
        question = state_question(text)
        if question is not None:
            return self._answer_question(question, tools, messages, open_jobs, texts)
        parts: list[Part] = []
        carried: Part | None = None
        raws = [piece for raw in split(text) for piece in by_tools(raw, tools)]
        if len(raws) > MAX_PARTS:
            return [Step(say=texts.too_many(len(raws)))]
        for index, raw in enumerate(raws):
            part = read_part(raw, tools)
            if part is None:
                continue
            if carried is not None:
                part = combine(carried, part)
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
        residue = understood(part, tool)
        if residue:
            guess = likely_meaning(part, tools)
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
            tool = background_variant(tool, tools) or tool
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
                return [Step(say=texts.which(param_label(tool, name, texts.zh), allowed))]
            ordered: list[tuple[str, str]] = []
            for _, parent_value, canonical, _ in matches:
                if (parent_value, canonical) not in ordered:
                    ordered.append((parent_value, canonical))
            names = [c for _, c in ordered]
            if len(set(names)) != len(names):  # one word, two parents: which kind is meant?
                return [
                    Step(
                        say=texts.which(param_label(tool, parent, texts.zh), sorted({p for p, _ in ordered}))
                    )
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
            label = param_label(tool, name, texts.zh)
            if name in tool.depends_on:
                parent = tool.depends_on[name]
                if parent in args:
                    return Step(say=texts.which(label, list(tool.scoped_words[name][args[parent]])))
                return Step(
                    say=texts.which(param_label(tool, parent, texts.zh), list(tool.scoped_words[name]))
                )
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


__all__ = ["MAX_REQUEST_CHARS", "OfflineModel", "Step", "Texts", "numbers_in", "zh_number"]
