"""What the offline model says instead of acting, drawn from the tool surface itself.

It owns the answers that need no call and the questions that replace a false "no tool": an example
sentence for each tool (built from its words and allowed values, so the planner reads it back as that
call), the values a parameter allows ("有哪些副本可以刷？"), whether a question is about anything the
tools know at all (the weather is not), the tools a request it could not read comes close to ("遗器
太多了" → salvaging relics, and which rarities), a partial value ("calyx" → the golden or the crimson
one), and what a status result says about the question asked ("刷了几次了" → the counter). The wording
around them is ``offline_texts``'; when each is said is ``offline_choosing``'s and ``offline``'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tether.models.base import ToolDef
from tether.models.understand import FILLER_EN, FILLER_ZH, fold, has_cjk, stem

# Placeholders for free-text parameters in an example sentence, by the parameter's name.
PLACEHOLDERS = {
    "path": "notes.md",
    "src": "draft.md",
    "dst": "final.md",
    "pattern": "*.pdf",
    "url": "https://example.com",
    "command": "ls",
    "name": "writing",
}
PLACEHOLDER_WORDS = {"query": ("天气预报", "python asyncio"), "text": ("预算", "deadline")}
EXAMPLE_COUNT = 3
COUNT_WORDS = re.compile(r"次|遍|\b(?:attempts?|rounds?|runs?|passes|times|repeats?)\b")
# Words that ask which values exist ("有哪些副本", "which instances", "what instance types are there").
WHICH = re.compile(r"哪些|哪几|哪个|哪种|什么|啥|几种|列表|清单|\bwhich\b|\bwhat\b|\blist\b|\bavailable\b")
# A question about counters or state, even when it names no tool ("一共多少次", "how many").
STATE_WORDS = (
    "多少", "几次", "几遍", "几轮", "次数", "状态", "运行", "开着", "在跑", "累计", "总共", "一共",
    "how many", "how much", "status", "running", "count", "total", "so far",
)  # fmt: skip
# Keys of a status result said in Chinese when no tool names them.
ZH_KEYS = {"running": "游戏运行中", "total": "累计", "count": "次数", "progress": "进度"}
IGNORED_STEMS = frozenset({"game", "task", "job", "tool", "file", "thing"})


def grams(text: str) -> set[str]:
    """What a text is compared on: each Chinese character and pair of characters, each Latin stem of
    three letters or more that is not a small word."""
    folded = fold(text)
    out: set[str] = set()
    for run in re.findall(r"[\u3400-\u9fff]+", folded):
        out.update(run)
        out.update(run[i : i + 2] for i in range(len(run) - 1))
    out = {g for g in out if not has_cjk(g) or not set(g) <= FILLER_ZH}  # "一下" names nothing
    for word in re.findall(r"[a-z][a-z'-]+", folded):
        if len(word) >= 3 and word not in FILLER_EN:
            out.add(stem(word))
    return out


def _vocabulary(tool: ToolDef, *, everything: bool = False) -> set[str]:
    """The grams that name ``tool``: its words and what its parameters are called; a single Chinese
    character only when it is a whole alias ("刷"), since one character alone means little. Words
    every tool of a kit shares ("game") are left out unless ``everything``: they tell no tool apart."""
    words = [*tool.aliases, tool.name.split("__")[-1].replace("_", " ")]
    words += [label for labels in tool.labels.values() for label in labels.values()]
    out: set[str] = set()
    for word in words:
        folded = fold(word)
        found = grams(word)
        if has_cjk(folded) and len(folded) > 1:
            found = {g for g in found if len(g) > 1 or not has_cjk(g)}
        out |= found
    return out if everything else out - IGNORED_STEMS


def _value_vocabulary(tool: ToolDef) -> set[str]:
    out: set[str] = set()
    for _, canonical, aliases in value_entries(tool):
        for word in (canonical, *aliases):
            out |= {g for g in grams(word) if len(g) > 1}
    return out - IGNORED_STEMS


def near_tools(text: str, tools: Sequence[ToolDef]) -> list[ToolDef]:
    """The business tools whose own words share the most with ``text`` (none when nothing is shared)."""
    mine = grams(text)
    scored = [(len(mine & _vocabulary(t)), t) for t in tools if t.kind == "business"]
    best = max((score for score, _ in scored), default=0)
    return [t for score, t in scored if score == best] if best else []


def relevant(text: str, tools: Sequence[ToolDef]) -> bool:
    """Whether ``text`` (a question without its question words) is about anything the tools know:
    their words or their values."""
    mine = grams(text)
    return any(
        mine & (_vocabulary(t, everything=True) | _value_vocabulary(t)) for t in tools if t.kind != "control"
    )


def value_entries(tool: ToolDef) -> list[tuple[str, str, tuple[str, ...]]]:
    """(parameter, canonical value, words people use for it) of every catalog value of ``tool``."""
    out = [
        (name, canonical, tuple(aliases))
        for name, words in tool.value_words.items()
        for canonical, aliases in words.items()
    ]
    for name, by_parent in tool.scoped_words.items():
        for words in by_parent.values():
            out += [(name, canonical, tuple(aliases)) for canonical, aliases in words.items()]
    return out


def partial_values(words: Sequence[str], tool: ToolDef) -> tuple[str, list[str]] | None:
    """(parameter, values) when the words not understood are part of the names of some of ``tool``'s
    values ("calyx" → the golden and the crimson calyx; "花萼" → the same): the values to offer."""
    # Chinese words left over are single characters ("花", "萼"): read together, as they were written.
    said = "".join(w for w in words if has_cjk(w)) + " " + " ".join(w for w in words if not has_cjk(w))
    mine = {g for g in grams(said) if len(g) > 1}
    if not mine:
        return None
    hits: dict[str, list[str]] = {}
    for name, canonical, aliases in value_entries(tool):
        if any(mine & {g for g in grams(w) if len(g) > 1} for w in (canonical, *aliases)):
            values = hits.setdefault(name, [])
            if canonical not in values:
                values.append(canonical)
    if not hits:
        return None
    name = next(iter(hits))  # the first parameter the surface lists (a parent before its child)
    return name, hits[name]


def _alias(tool: ToolDef, zh: bool) -> str:
    return next((a for a in tool.aliases if has_cjk(a) == zh), tool.name.split("__")[-1].replace("_", " "))


def _latin(words: Sequence[str]) -> str | None:
    return next((w for w in words if not has_cjk(w)), None)


def shown_value(canonical: str, aliases: Sequence[str], zh: bool) -> str:
    """A catalog value as the person reads it: the canonical name, with an English word beside it."""
    if zh or not has_cjk(canonical):
        return canonical
    latin = _latin(aliases)
    return f"{canonical} ({latin})" if latin else canonical


def example(tool: ToolDef, zh: bool) -> str:
    """A sentence that asks for ``tool``, with a value for each parameter it needs (and a count when
    it takes one): what the person could type, and what the planner reads back as that call."""
    props: Mapping[str, Any] = tool.parameters.get("properties", {})
    required = list(tool.parameters.get("required", []))
    words = [_alias(tool, zh)]
    for name in required:
        words += _example_value(tool, name, props.get(name, {}), zh)
    counts = [n for n, p in props.items() if n not in required and _is_count(tool, n, p)]
    if counts and required:
        words.append(f"{EXAMPLE_COUNT} 次" if zh else f"{EXAMPLE_COUNT} times")
    return _joined([w for w in words if w], zh)


def _joined(words: Sequence[str], zh: bool) -> str:
    """Words as a sentence: Chinese runs together ("刷副本回忆之蕾"), a space next to Latin or digits."""
    out = ""
    for word in words:
        tight = zh and out and has_cjk(out[-1]) and has_cjk(word[0])
        out += word if tight or not out else f" {word}"
    return out


def _is_count(tool: ToolDef, name: str, prop: Mapping[str, Any]) -> bool:
    """An integer parameter that says how many times (attempts, rounds, 次数), not a size or a choice."""
    integer = prop.get("type") == "integer" or any(o.get("type") == "integer" for o in prop.get("anyOf", []))
    said = " ".join(tool.labels.get(name, {}).values()) + " " + str(prop.get("description", ""))
    return integer and not prop.get("enum") and bool(COUNT_WORDS.search(f"{name} {said}"))


def _example_value(tool: ToolDef, name: str, prop: Mapping[str, Any], zh: bool) -> list[str]:
    if name in tool.depends_on:
        parent = tool.depends_on[name]
        first = next(iter(tool.scoped_words[name].values()), {})
        canonical, aliases = next(iter(first.items()), ("", ()))
        if not zh and _latin(aliases):
            return [str(_latin(aliases))]
        return [canonical] if name != parent else []
    if name in tool.value_words:
        if any(name == tool.depends_on.get(child) for child in tool.depends_on):
            return []  # the child's value names its parent too
        canonical, aliases = next(iter(tool.value_words[name].items()))
        return [str(_latin(aliases)) if not zh and _latin(aliases) else canonical]
    if prop.get("enum"):
        return [str(prop["enum"][-1])]
    if name in PLACEHOLDERS:
        return [PLACEHOLDERS[name]]
    if name in PLACEHOLDER_WORDS:
        return [PLACEHOLDER_WORDS[name][0 if zh else 1]]
    return []


def shown_values(tool: ToolDef, name: str, canonicals: Sequence[str], zh: bool) -> list[str]:
    """Some values of ``name`` as the person reads them (see ``shown_value``)."""
    words: dict[str, tuple[str, ...]] = {c: tuple(a) for c, a in tool.value_words.get(name, {}).items()}
    for by_parent in tool.scoped_words.get(name, {}).values():
        words.update({c: tuple(a) for c, a in by_parent.items()})
    return [shown_value(c, words.get(c, ()), zh) for c in canonicals]


def allowed_values(tool: ToolDef, name: str, zh: bool) -> list[str]:
    """The values ``name`` allows, as the person reads them; a child parameter's grouped under each
    value of its parent ("拟造花萼（金）：回忆之蕾、…")."""
    props: Mapping[str, Any] = tool.parameters.get("properties", {})
    child = next((c for c, p in tool.depends_on.items() if p == name), None)
    if name in tool.depends_on:
        child, name = name, tool.depends_on[name]
    if child is not None:
        out = []
        for parent_value, words in tool.scoped_words[child].items():
            parent_words = tool.value_words.get(name, {}).get(parent_value, ())
            children = (", " if not zh else "、").join(shown_value(c, a, zh) for c, a in words.items())
            out.append(f"{shown_value(parent_value, parent_words, zh)}{'：' if zh else ': '}{children}")
        return out
    if name in tool.value_words:
        return [shown_value(c, a, zh) for c, a in tool.value_words[name].items()]
    enum = props.get(name, {}).get("enum") or next(
        (o["enum"] for o in props.get(name, {}).get("anyOf", []) if o.get("enum")), []
    )
    return [str(v) for v in enum]


def asked_values(text: str, tools: Sequence[ToolDef]) -> tuple[ToolDef, str, str | None] | None:
    """(tool, parameter, parent value or None) when ``text`` asks which values a parameter takes
    ("有哪些副本可以刷？", "which instances can I farm?", "凝滞虚影有哪些？"): a which-word and what the
    parameter is called (most of its words), or a value whose own values are asked for."""
    folded = fold(text)
    if not WHICH.search(folded):
        return None
    mine = grams(text)
    best: tuple[int, ToolDef, str, str | None] | None = None
    for tool in tools:
        if tool.kind != "business":
            continue
        for name, labels in tool.labels.items():
            if not allowed_values(tool, name, True):
                continue
            for label in (*labels.values(), name.replace("_", " ")):
                label_grams = {g for g in grams(label) if len(g) > 1 or not has_cjk(g)}
                shared = len(label_grams & mine)
                if label_grams and 2 * shared >= len(label_grams):
                    score = shared + len(mine & _vocabulary(tool))
                    if best is None or score > best[0]:
                        best = (score, tool, name, None)
        for child, parent in tool.depends_on.items():
            for value, aliases in tool.value_words.get(parent, {}).items():
                if any(len(w) > 1 and fold(w) in folded for w in (value, *aliases)):
                    score = 100  # a value named outright says more than a label's words
                    if best is None or score > best[0]:
                        best = (score, tool, child, value)
    return (best[1], best[2], best[3]) if best else None


def facts(question: str, data: Mapping[str, Any], tools: Sequence[ToolDef], zh: bool) -> list[str]:
    """What a status result says, the fields the question is about first ("刷了几次" → the farm
    counter): each field named in the person's language where a tool names it."""
    mine = grams(question)
    shown: list[tuple[int, str]] = []
    for key, value in data.items():
        if not isinstance(value, int | float | bool) or key.startswith("_"):
            continue
        owner = None if isinstance(value, bool) else _owner(key, tools)
        score = len(mine & _vocabulary(owner)) if owner is not None else 0
        score += sum(1 for part in key.split("_") if stem(part) in mine)
        score += len(mine & {g for g in grams(ZH_KEYS.get(key, "")) if len(g) > 1})
        shown.append((score, _fact(key, value, owner, zh)))
    best = max((score for score, _ in shown), default=0)
    return [text for score, text in shown if score == best] if best else [text for _, text in shown]


def _owner(key: str, tools: Sequence[ToolDef]) -> ToolDef | None:
    """The tool a result field counts ("farm_attempts_total" → farming; "salvaged_total" → salvage)."""
    parts = [stem(p) for p in key.split("_") if len(p) >= 3]
    for tool in tools:
        name = [stem(p) for p in tool.name.split("__")[-1].split("_")]
        if tool.kind == "business" and parts and (parts[0] in name or name[0] in parts[:1]):
            return tool
    return None


def _fact(key: str, value: int | float | bool, owner: ToolDef | None, zh: bool) -> str:
    if isinstance(value, bool):
        if zh:
            said = ZH_KEYS.get(key, key.replace("_", " "))
            return f"{said}：{'是' if value else '否'}"
        return f"{key.replace('_', ' ')}: {'yes' if value else 'no'}"
    if owner is not None:
        name = _alias(owner, zh)
        total = key.endswith("total")
        if zh:
            return f"{name}{'累计' if total else ''} {value} 次"
        return f"{name}: {value}{' in all' if total else ''}"
    if zh:
        return f"{ZH_KEYS.get(key, key.replace('_', ' '))}：{value}"
    return f"{key.replace('_', ' ')}: {value}"
