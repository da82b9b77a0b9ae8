"""Free-text values in a request: file paths, name patterns and quoted text ("读一下 notes.md", "find all
pdf files", "search my files for 'deadline'").

Catalog values are read by ``offline_reading``; this module owns the values no catalog lists: where
they are in the request, which parameters of a tool take them (a path for ``path``/``src``/``dst``, a
pattern for ``pattern``, text for ``text``/``query``), and which tool a request that names a path but
no whole tool word means, by its verb ("read report.md" → the tool whose words are "read the file").
Paths keep the case the person wrote them in: the request is folded for reading, the path is not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.models.base import ToolDef
from tether.models.understand import FILLER_EN, FILLER_ZH, fold, stems

_NAME = r"[\w\u4e00-\u9fff.-]"
EXTENSIONS = "pdf|docx?|pptx?|xlsx?|md|txt|csv|json|html?|py|log|zip|png|jpe?g|yaml|yml|toml"
PATH = re.compile(
    rf"(?<![\w/.*-])((?:{_NAME}+/)*[\w\u4e00-\u9fff-]{_NAME}*\.(?:{EXTENSIONS})|(?:{_NAME}+/)+{_NAME}*)"
    r"(?![\w/])",
    re.I,
)
GLOB = re.compile(r"(?<!\S)(\*[\w.*-]*|[\w-]+\*[\w.*-]*)(?!\S)")
# "pdf files", "pdf 文件", "所有的 md 文件": files of one type, as a name pattern.
TYPED = re.compile(rf"\b({EXTENSIONS})\s*(?:files?|documents?|文件|文档)", re.I)
QUOTED = re.compile(r"[\"'“‘「『]([^\"'”’」』]{1,200})[\"'”’」』]")
MAYBE = re.compile(r"[./*\"'“‘「『]|files?|documents?|文件|文档", re.I)
KIND_OF = {
    "path": "path",
    "src": "path",
    "dst": "path",
    "pattern": "pattern",
    "text": "text",
    "query": "text",
}
# Words that name the object of a file tool, not what it does ("read the file" → "read").
OBJECT_WORDS = frozenset(s for word in ("file", "文件夹", "folder", "document") for s in stems(word))


@dataclass(frozen=True, slots=True)
class Free:
    kind: str  # path | pattern | text
    value: str
    start: int
    end: int


def free_values(text: str) -> list[Free]:
    """The free values in ``text``, in order, none overlapping."""
    if not MAYBE.search(text):
        return []  # most parts hold none: one search instead of four
    found: list[Free] = []

    def add(kind: str, value: str, start: int, end: int) -> None:
        if not any(f.start < end and start < f.end for f in found):
            found.append(Free(kind, value, start, end))

    for m in QUOTED.finditer(text):
        add("text", m.group(1).strip(), m.start(), m.end())
    for m in GLOB.finditer(text):
        add("pattern", m.group(1), m.start(), m.end())
    for m in TYPED.finditer(text):
        add("pattern", f"*.{m.group(1).lower()}", m.start(), m.start(1) + len(m.group(1)))
    for m in PATH.finditer(text):
        if not re.fullmatch(r"[\d.]+", m.group(1)) and "://" not in text[max(0, m.start() - 3) : m.start()]:
            add("path", m.group(1), m.start(), m.end())
    return sorted(found, key=lambda f: f.start)


def originals(request: str) -> dict[str, str]:
    """Each free value of ``request`` as folded → as written (the case of "README.md" matters)."""
    return {fold(f.value): f.value for f in free_values(request)}


def params_for(tool: ToolDef, kind: str) -> list[str]:
    """The parameters of ``tool`` a free value of ``kind`` goes to, in the order the tool lists them."""
    props: Mapping[str, Any] = tool.parameters.get("properties", {})
    return [
        name
        for name, prop in props.items()
        if KIND_OF.get(name) == kind and name not in tool.value_words and not prop.get("enum")
    ]


def tool_by_verb(
    text: str, frees: Sequence[Free], tools: Sequence[ToolDef]
) -> tuple[ToolDef, list[str]] | None:
    """The one tool a request with free values but no whole tool word means: its words other than the
    object ("read the file" → "read") found in the request, and a parameter for each value. (tool, the
    words found) or None when no tool, or more than one equally, fits."""
    mine = set(stems(text))
    best: list[tuple[int, ToolDef, list[str]]] = []
    for tool in tools:
        if tool.kind != "business" or not all(params_for(tool, f.kind) for f in frees):
            continue
        for alias in tool.aliases:
            words = [w for w in stems(alias) if w not in FILLER_EN and w not in FILLER_ZH]
            verbs = [w for w in words if w not in OBJECT_WORDS]
            if verbs and all(v in mine for v in verbs):
                score = len("".join(verbs)) + sum(1 for w in words if w in OBJECT_WORDS and w in mine)
                best.append((score, tool, verbs))
    if not best:
        return None
    top = max(score for score, _, _ in best)
    winners = {tool.name: (tool, verbs) for score, tool, verbs in best if score == top}
    return next(iter(winners.values())) if len(winners) == 1 else None


def place(tool: ToolDef, frees: Sequence[Free], known: Mapping[str, Any]) -> dict[str, str] | None:
    """The arguments the free values fill, in order per kind ("a.md to b.md" → src, dst); None when a
    value has no parameter left to go to."""
    args: dict[str, str] = {}
    for free in frees:
        slots = [p for p in params_for(tool, free.kind) if p not in args and p not in known]
        if not slots:
            return None
        args[slots[0]] = free.value
    return args
