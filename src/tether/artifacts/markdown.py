"""Markdown out: ``to_markdown(doc)``, which ``from_markdown`` reads back to the same document.

Text is escaped where Markdown would read it as markup (emphasis, links, HTML, entities, and a line
that would start a heading, list, quote or table), so what a person or a model wrote stays text; the
structure — emphasis, links, nested and numbered lists, code, tables, images, quotes — is written as
CommonMark with GFM tables.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tether.artifacts.document import (
    Code,
    Document,
    Image,
    ListBlock,
    Paragraph,
    Quote,
    Span,
    Subheading,
    Table,
)

LABELS = {"zh": {"sources": "来源", "notes": "备注："}, "en": {"sources": "Sources", "notes": "Notes:"}}

_INLINE = re.compile(r"([\\`*_\[\]<>&|~!])")
_LINE_START = re.compile(r"^(#|[-+=]|\d+[.)]|>|\s)")

AnyBlock = Paragraph | Subheading | Code | Table | Image | ListBlock | Quote


def escape(text: str) -> str:
    """``text`` as Markdown that renders as exactly this text."""
    escaped = _INLINE.sub(r"\\\1", text)
    if _LINE_START.match(escaped):
        escaped = "\\" + escaped if not escaped[0].isdigit() else re.sub(r"^(\d+)([.)])", r"\1\\\2", escaped)
    return escaped


def heading(text: str) -> str:
    """``text`` escaped for a heading line, where a closing run of ``#`` would be read as markup."""
    return re.sub(r"(^|\s)(#+)$", r"\1\\\2", escape(text))


def _code_span(text: str) -> str:
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = (
        " "
        if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" "))
        else ""
    )
    return f"{fence}{pad}{text}{pad}{fence}"


def _span(span: Span, first: bool = False) -> str:
    """One span; the first of a line is escaped where it would start a heading, list or quote."""
    core = span.text.strip(" ")
    if not core:
        return span.text
    lead = span.text[: len(span.text) - len(span.text.lstrip(" "))]
    trail = span.text[len(span.text.rstrip(" ")) :]
    if span.code:
        text = _code_span(core)
    else:
        text = escape(core) if first and not lead else _INLINE.sub(r"\\\1", core)
    if span.strike:
        text = f"~~{text}~~"
    if span.italic:
        text = f"*{text}*"
    if span.bold:
        text = f"**{text}**"
    if span.link:
        text = f"[{text}](<{span.link}>)"
    return lead + text + trail


def spans_md(spans: Sequence[Span]) -> str:
    return "".join(_span(span, first=index == 0) for index, span in enumerate(spans))


def _indent(lines: list[str], first: str, rest: str) -> list[str]:
    return [(first if i == 0 else rest) + line if line else "" for i, line in enumerate(lines)]


def block_md(block: AnyBlock, second: bool = False) -> list[str]:
    """One block as Markdown lines (without the blank line after it)."""
    if isinstance(block, Paragraph):
        return [spans_md(block.spans)]
    if isinstance(block, Subheading):
        return ["#" * block.level + " " + re.sub(r"(^|\s)(#+)$", r"\1\\\2", spans_md(block.spans))]
    if isinstance(block, Code):
        fence = "`" * max(3, max((len(r) for r in re.findall(r"^`+", block.text, re.M)), default=0) + 1)
        return [f"{fence}{block.language}", *block.text.splitlines(), fence]
    if isinstance(block, Table):
        return _table_md(block)
    if isinstance(block, Image):
        return [f"![{escape(block.alt)}](<{block.src}>)"]
    if isinstance(block, Quote):
        return [f"> {line}" if line else ">" for line in blocks_md(block.blocks)]
    out: list[str] = []
    for number, item in enumerate(block.items, block.start):
        # A list right after another list takes the other marker, or the two would be read as one.
        marker = (f"{number}) " if second else f"{number}. ") if block.ordered else ("* " if second else "- ")
        task = "" if item.checked is None else ("[x] " if item.checked else "[ ] ")
        inner = blocks_md(item.blocks, tight=True) or [""]
        out += _indent(inner, marker + task, " " * len(marker))
    return out


def _cell(spans: Sequence[Span]) -> str:
    return "".join(_span(span) for span in spans).replace("|", "\\|") or " "


def _table_md(table: Table) -> list[str]:
    rule = {"left": ":--", "center": ":-:", "right": "--:", "": "---"}
    lines = ["| " + " | ".join(_cell(cell) for cell in table.header) + " |",
             "| " + " | ".join(rule[a] for a in table.align) + " |"]  # fmt: skip
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in table.rows]
    return lines


def blocks_md(blocks: Sequence[AnyBlock], tight: bool = False) -> list[str]:
    out: list[str] = []
    second = False
    for index, block in enumerate(blocks):
        if index and not (tight and isinstance(block, ListBlock)):
            out.append("")
        follows = index > 0 and isinstance(blocks[index - 1], ListBlock) and isinstance(block, ListBlock)
        second = follows and not second
        out += block_md(block, second)
    return out


def to_markdown(doc: Document) -> str:
    labels = LABELS[doc.lang]
    out = [f"# {heading(doc.title)}", ""]
    if doc.subtitle:
        out += [f"_{escape(doc.subtitle)}_", ""]
    for section in doc.sections:
        if section.heading:
            out += [f"## {heading(section.heading)}", ""]
        if section.blocks:
            out += [*blocks_md(section.blocks), ""]
        if section.notes:
            lines = [line for line in section.notes.splitlines() if line]
            out += [f"> {labels['notes']} {escape(lines[0])}"]
            for line in lines[1:]:
                out += [">", f"> {escape(line)}"]
            out += [""]
    if doc.sources:
        out += [f"## {labels['sources']}", ""]
        out += [f"{i}. [{escape(source.title)}](<{source.url}>)" for i, source in enumerate(doc.sources, 1)]
        out += [""]
    return "\n".join(out)
