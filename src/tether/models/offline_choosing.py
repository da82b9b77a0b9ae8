"""Which calls the offline model makes for a request it has read, or why it makes none.

It owns the second half of the offline planner: a question about what it can do, a hypothetical or a
question about state is answered without acting; otherwise each part read by ``offline_reading`` becomes
steps: its tool (named, continued from the part before, or the one whose catalog its values belong to),
its arguments (values, counts, one call per value when a part names several), the job a control tool
acts on. A part with any word not understood, an argument missing or a value that fits two ways turns
the whole plan into one step that says so, so nothing runs on a reading it is unsure of.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.models import offline_answers as answers
from tether.models import offline_free as free
from tether.models.base import Message, OpenJob, ToolDef
from tether.models.offline_conversation import latest_job
from tether.models.offline_reading import (
    ABILITY,
    EXECUTION_ID,
    HYPOTHETICAL,
    MAX_PARTS,
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
from tether.models.understand import FILLER_ZH, NEGATIONS, fold, has_cjk, reorder

# Words of a question that say nothing about what it asks ("如何", "how").
QUESTION_WORDS = (
    "如何",
    "怎样",
    "怎么",
    "什么",
    "多少",
    "吗",
    "呢",
    "么",
    "how",
    "what",
    "is",
    "are",
    "does",
)
COUNT_QUESTION = re.compile(
    r"(?:多少|几)\s*[次遍轮回场把盘局趟]|how (?:many|much) (?:times|runs|rounds|passes|attempts)|how often"
)
JOB_WORDS = ("后台", "任务", "进度", "进展", "挂机", "job", "jobs", "background", "progress", "loop")


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One call of a plan, or what is said instead of any call."""

    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    say: str | None = None  # a question or an explanation instead of a call: nothing runs
    # Said instead of making the call if it is still unresolved when its turn comes (no job to stop).
    unresolved: str | None = None
    # This step completes the one before it (a later part only added arguments): it replaces it.
    extends: bool = False
    # What is said is that no tool does it: the turn ends failed (``models.base.UNABLE``).
    unable: bool = False


def plan(
    request: str,
    tools: Sequence[ToolDef],
    messages: Sequence[Message],
    open_jobs: Sequence[OpenJob] | None,
    texts: Texts,
) -> list[Step]:
    """The calls ``request`` asks for, in order; or one step that says why nothing will run."""
    text = reorder(fold(request)).strip(" .!?！？。")
    if not text:
        return [Step(say=texts.nothing())]
    if ABILITY.search(text):
        return [Step(say=texts.abilities(tools))]
    asked = answers.asked_values(text, tools)
    if asked is not None:  # "有哪些副本可以刷？": the values, in plain words
        tool, name, under = asked
        allowed = answers.allowed_values(tool, name, texts.zh)
        if under is not None:  # "凝滞虚影有哪些": the values under the one named
            allowed = [line for line in allowed if line.startswith(under)] or allowed
        return [Step(say=texts.values(tool, param_label(tool, name, texts.zh), allowed))]
    if HYPOTHETICAL.search(text):
        return [Step(say=texts.hypothetical(tools))]
    question = state_question(text)
    if question is not None:
        return _answer_question(question, tools, messages, open_jobs, texts)
    raws = [piece for raw in split(text) for piece in by_tools(raw, tools)]
    if len(raws) > MAX_PARTS:
        return [Step(say=texts.too_many(len(raws)))]
    parts = _read_parts(raws, tools)
    if not parts:
        return [Step(say=texts.nothing())]
    steps: list[Step] = []
    previous: Step | None = None
    for part in parts:
        made = _steps(part, previous, tools, messages, open_jobs, texts)
        if made and made[0].say is not None:
            return made[:1]
        if made and steps and made[0].extends:
            steps[-1] = made[0]
            made = made[1:]
        steps.extend(made)
        previous = steps[-1] if steps else None
    written = free.originals(request)  # paths as the person wrote them: "README.md", not "readme.md"
    for step in steps:
        for key, value in list(step.args.items()):
            if isinstance(value, str):
                step.args[key] = written.get(value) or _as_written(value, request)
    by_name = {tool.name: tool for tool in tools}
    for step in steps:  # only now: a later part may have given what an earlier one lacked
        tool = by_name.get(step.tool or "")
        if tool is not None and tool.kind == "business":
            question = _missing(tool, step.args, texts) or _outside(tool, step.args, texts)
            if question is not None:
                return [question]
    return steps


def _read_parts(raws: Sequence[str], tools: Sequence[ToolDef]) -> list[Part]:
    """Each piece of a request read, values named before their tool joined to the part that names it."""
    parts: list[Part] = []
    carried: Part | None = None
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
    return parts


def _steps(
    part: Part,
    previous: Step | None,
    tools: Sequence[ToolDef],
    messages: Sequence[Message],
    open_jobs: Sequence[OpenJob] | None,
    texts: Texts,
) -> list[Step]:
    """The steps of one part. A part that names no tool continues ``previous`` (the step before it)
    with its values, or takes the tool whose catalog they belong to."""
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
    if residue and tool is not None and _as_text(tool, part, residue):
        residue = []  # "grep the files for TODO": the words left are the text to look for
    stop = next((t for t in tools if t.kind == "control" and t.name.endswith("stop_task")), None)
    if (
        residue
        and stop is not None
        and set(residue) <= NEGATIONS
        and (part.background or (tool and tool.background))
    ):
        return [_control(stop, part, messages, open_jobs, texts)]  # "别挂机了": stop the background work
    if residue:
        guess = likely_meaning(part, tools)
        if guess is not None:
            return [Step(say=texts.did_you_mean(guess))]
        if tool is None:
            return [_near(part, tools, texts)]
        partial = answers.partial_values(residue, tool)
        if partial is not None:  # "farm calyx": a value named in part, the ones it may be offered
            offered = answers.shown_values(tool, partial[0], partial[1], texts.zh)
            return [Step(say=texts.which(param_label(tool, partial[0], texts.zh), offered))]
        named = {k: v[0] for k, v in part.values.items() if v}
        for param, parent_value, canonical, _ in part.scoped:
            named.setdefault(tool.depends_on.get(param, param), parent_value)
            named.setdefault(param, canonical)
        needed = _needed(tool, named, texts.zh)
        if needed is not None and needed[2] == "catalog" and _looks_like_a_value(residue):
            return [Step(say=texts.unknown_value(residue, needed[0], needed[1]))]  # "打扫阁楼": the rooms
        return [Step(say=texts.unsure(residue, part.text))]
    if tool is None:
        if not (part.has_values or part.background):
            return []  # only small words: nothing asked here
        return [_near(part, tools, texts)]
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
        return [_control(tool, part, messages, open_jobs, texts)]
    return _arguments(tool, part, inherited, texts)


def _looks_like_a_value(residue: list[str]) -> bool:
    """Words not understood that could be a value the catalog lacks ("阁楼", "attic"): no negation,
    no question or count word ("几", "遍"), a Chinese word of two characters or an English word."""
    said = "".join(residue)
    if NEGATIONS & set(residue) or re.search(r"[几多少吗呢么哪啥谁次遍轮回共]", said):
        return False
    return len(said) >= 2


def _as_written(value: str, request: str) -> str:
    """``value`` in the case the request wrote it ("todo" → "TODO"), when the request holds it."""
    if not value.isascii():
        return value
    found = re.search(re.escape(value), request, re.IGNORECASE)
    return found.group(0) if found else value


def _as_text(tool: ToolDef, part: Part, residue: list[str]) -> bool:
    """Takes the words not understood as the free text a tool needs ("search the files for TODO"),
    when it needs exactly one and it is not destructive: the words then name what to look for,
    never what to change."""
    required = set(tool.parameters.get("required", []))
    slots = [p for p in free.params_for(tool, "text") if p in required]
    if tool.danger == "destructive" or len(slots) != 1 or part.free or NEGATIONS & set(residue):
        return False
    joined = "".join(residue) if all(has_cjk(w) for w in residue) else " ".join(residue)
    part.free = [free.Free("text", joined, 0, 0)]
    return True


def _near(part: Part, tools: Sequence[ToolDef], texts: Texts) -> Step:
    """A part that names no tool: the tools its words come close to, each with the value it still
    needs and a sentence to say ("遗器太多了" → salvaging, which rarity); a plain "I can't" when none
    is close. Nothing runs either way: the person never named the action."""
    near = answers.near_tools(part.text, tools)
    if not near:
        return Step(say=texts.cannot(part.text, tools), unable=True)
    offers = []
    for tool in near:
        label, allowed, kind = _needed(tool, {}, texts.zh) or ("", [], "")
        offers.append((tool, label, [] if kind == "free" else allowed))
    return Step(say=texts.near(part.text, offers))


def _control(
    tool: ToolDef,
    part: Part,
    messages: Sequence[Message],
    open_jobs: Sequence[OpenJob] | None,
    texts: Texts,
) -> Step:
    """The job a control tool acts on: the one the part names, else the newest open one."""
    eid = part.execution_id or latest_job(messages, open_jobs)
    if eid is None:
        return Step(tool=tool.name, unresolved=texts.no_job())
    return Step(tool=tool.name, args={"execution_id": eid})


def _arguments(tool: ToolDef, part: Part, inherited: dict[str, Any], texts: Texts) -> list[Step]:
    """The calls of ``tool`` for the part's values and numbers, over the arguments ``inherited`` from
    the step it continues; or one step that says which values it could not place."""
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
    question = _scoped_values(tool, part, props, inherited, base, variants, texts)
    if question is not None:
        return [question]
    if part.free:
        placed = free.place(tool, part.free, base)
        if placed is None:  # a path or a text with nowhere to go
            return [Step(say=texts.unsure([f.value for f in part.free], part.text))]
        base.update(placed)
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
    choices = _choices(args, variants)
    extends = (
        bool(inherited)
        and len(choices) == 1
        and all(choices[0].get(k) == v for k, v in inherited.items() if k in props)
    )
    return [Step(tool=tool.name, args=chosen, extends=extends) for chosen in choices]


def _scoped_values(
    tool: ToolDef,
    part: Part,
    props: dict[str, Any],
    inherited: dict[str, Any],
    base: dict[str, Any],
    variants: list[tuple[str, list[Any]]],
    texts: Texts,
) -> Step | None:
    """The part's values that belong under a parent value, added to ``base``
    (one) or ``variants`` (several: one call each); or the question to ask when none fits the parent
    given, or one word names values under two parents."""
    for name in {s[0] for s in part.scoped}:
        if name not in props:
            continue
        parent = tool.depends_on[name]
        fixed = base.get(parent) or (None if parent in part.values else inherited.get(parent))
        matches = [s for s in part.scoped if s[0] == name and (fixed is None or s[1] == fixed)]
        if not matches:
            allowed = list(tool.scoped_words[name].get(str(fixed), {}))
            return Step(say=texts.which(param_label(tool, name, texts.zh), allowed))
        ordered: list[tuple[str, str]] = []
        for _, parent_value, canonical, _ in matches:
            if (parent_value, canonical) not in ordered:
                ordered.append((parent_value, canonical))
        names = [c for _, c in ordered]
        if len(set(names)) != len(names):  # one word, two parents: which kind is meant?
            return Step(say=texts.which(param_label(tool, parent, texts.zh), sorted({p for p, _ in ordered})))
        if len(ordered) == 1:
            base.setdefault(parent, ordered[0][0])
            base[name] = ordered[0][1]
        else:
            variants.append((f"{parent}\x00{name}", list(ordered)))
    return None


def _choices(args: dict[str, Any], variants: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    """The arguments of each call: ``args`` once, or once per value of the one parameter that varies
    (a scoped value sets its parent too)."""
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
    return choices


def _missing(tool: ToolDef, args: dict[str, Any], texts: Texts) -> Step | None:
    """The question for the first required argument ``args`` lacks, with the values allowed (or, for
    free text such as a path, what it is)."""
    needed = _needed(tool, args, texts.zh)
    if needed is None:
        return None
    label, allowed, kind = needed
    return Step(say=texts.what(label, allowed[0]) if kind == "free" else texts.which(label, allowed))


def _outside(tool: ToolDef, args: dict[str, Any], texts: Texts) -> Step | None:
    """The question for an argument outside the values its parameter allows ("五星遗器": 2, 3 or 4),
    asked before any call is made (the executor would refuse it anyway, after a confirmation)."""
    props: dict[str, Any] = dict(tool.parameters.get("properties", {}))
    for name, value in args.items():
        allowed = props.get(name, {}).get("enum") or _enum_of(props.get(name, {}))
        if allowed and value not in allowed:
            return Step(say=texts.which(param_label(tool, name, texts.zh), [str(v) for v in allowed]))
    return None


def _needed(tool: ToolDef, args: dict[str, Any], zh: bool) -> tuple[str, list[str], str] | None:
    """(label, allowed values, kind) of the first required argument ``args`` lacks; kind is "catalog",
    "enum" or "free" (then the one value is the parameter's description)."""
    props: dict[str, Any] = dict(tool.parameters.get("properties", {}))
    required = set(tool.parameters.get("required", []))
    for name in props:
        if name in args or name not in required:
            continue
        label = param_label(tool, name, zh)
        if name in tool.depends_on:
            parent = tool.depends_on[name]
            if parent in args:
                return label, _shown(tool.scoped_words[name][args[parent]], zh), "catalog"
            return param_label(tool, parent, zh), _shown(tool.value_words.get(parent, {}), zh), "catalog"
        if name in tool.value_words:
            return label, _shown(tool.value_words[name], zh), "catalog"
        allowed = props[name].get("enum") or _enum_of(props[name])
        if allowed:
            return label, [str(v) for v in allowed], "enum"
        return label, [props[name].get("description", name)], "free"
    return None


def _shown(words: Mapping[str, Sequence[str]], zh: bool) -> list[str]:
    """Catalog values to offer: their canonical names, with an English word beside each in English."""
    return [answers.shown_value(canonical, aliases, zh) for canonical, aliases in words.items()]


def _answer_question(
    text: str,
    tools: Sequence[ToolDef],
    messages: Sequence[Message],
    open_jobs: Sequence[OpenJob] | None,
    texts: Texts,
) -> list[Step]:
    """A question about state: the job status tool when a job is open and the question is about it
    (or there is no status task), else the status task; that no job runs when it asks about jobs and
    none does; a plain "I can't" when the question is about nothing the tools know (the weather)."""
    job = latest_job(messages, open_jobs)
    status_tool = _status_tool(tools)
    about_job = any(fold(w) in text for w in PROGRESS_WORDS) or EXECUTION_ID.search(text)
    if _unrelated(text, tools) and (not about_job or job is None):
        return [Step(say=texts.cannot_answer(text), unable=True)]
    control = next((t for t in tools if t.kind == "control" and t.name.endswith("status")), None)
    if control is not None and (job is not None and (about_job or status_tool is None)):
        explicit = EXECUTION_ID.search(text)
        return [Step(tool=control.name, args={"execution_id": explicit.group(0) if explicit else job})]
    if job is None and _about_jobs(text, tools):
        return [Step(say=texts.no_jobs())]
    if status_tool is not None:
        return [Step(tool=status_tool.name, args={})]
    return [Step(say=texts.no_job())]


def _unrelated(text: str, tools: Sequence[ToolDef]) -> bool:
    """Whether a question has words of its own beyond asking ("how many", "还在运行吗") and none of
    them is about anything the tools know ("how many people live in Paris", "明天会下雨吗")."""
    if COUNT_QUESTION.search(text):
        return False  # how often the work ran: the counters the tools keep
    rest = text
    for word in sorted((*PROGRESS_WORDS, *QUESTION_WORDS, *answers.STATE_WORDS), key=len, reverse=True):
        said = fold(word)
        rest = re.sub(rf"\b{re.escape(said)}\b", " ", rest) if said.isascii() else rest.replace(said, " ")
    rest = "".join(" " if ch in FILLER_ZH else ch for ch in rest)
    return bool(answers.grams(rest)) and not answers.relevant(rest, tools)


def _about_jobs(text: str, tools: Sequence[ToolDef]) -> bool:
    """A question about background jobs ("后台任务进度", "my background jobs") that names no task."""
    if not any(fold(w) in text for w in JOB_WORDS):
        return False
    named = (fold(a) for t in tools if t.kind == "business" for a in t.aliases if len(a) > 1)
    return not any(alias in text for alias in named)


def _status_tool(tools: Sequence[ToolDef]) -> ToolDef | None:
    """The business task that reports state ("status", "状态"), if the surface has one."""
    for tool in tools:
        if tool.kind == "business" and (
            tool.name.endswith("status") or any(fold(a) in ("status", "状态") for a in tool.aliases)
        ):
            return tool
    return None


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


def _is_int(prop: dict[str, Any]) -> bool:
    if prop.get("type") == "integer":
        return True
    if any(option.get("type") == "integer" for option in prop.get("anyOf", [])):
        return True
    enum = prop.get("enum")
    return bool(enum) and all(isinstance(v, int) for v in enum)


def _enum_of(prop: dict[str, Any]) -> list[Any]:
    """The values of the first ``anyOf`` option that lists some: an optional enum."""
    for option in prop.get("anyOf", []):
        if option.get("enum"):
            return list(option["enum"])
    return []
