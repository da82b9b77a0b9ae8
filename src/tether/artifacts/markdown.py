"""Markdown out: ``to_markdown(doc)``, which ``from_markdown`` reads back to the same document.

Text is escaped where Markdown would read it as markup (emphasis, links, HTML, entities, and a line
that would start a heading, list, quote or table), so what a person or a model wrote stays text.
"""

from __future__ import annotations

import re

from tether.artifacts.document import Document

LABELS = {"zh": {"sources": "来源", "notes": "备注："}, "en": {"sources": "Sources", "notes": "Notes:"}}

_INLINE = re.compile(r"([\\`*_\[\]<>&|~!])")
_LINE_START = re.compile(r"^(#|[-+=]|\d+[.)]|>|\s)")


def escape(text: str) -> str:
    """``text`` as Markdown that renders as exactly this text."""
    escaped = _INLINE.sub(r"\\\1", text)
    if _LINE_START.match(escaped):
        escaped = "\\" + escaped if not escaped[0].isdigit() else re.sub(r"^(\d+)([.)])", r"\1\\\2", escaped)
    return escaped


def to_markdown(doc: Document) -> str:
    labels = LABELS[doc.lang]
    out = [f"# {escape(doc.title)}", ""]
    if doc.subtitle:
        out += [f"_{escape(doc.subtitle)}_", ""]
    for section in doc.sections:
        if section.heading:
            out += [f"## {escape(section.heading)}", ""]
        for paragraph in section.paragraphs:
            out += [escape(paragraph), ""]
        if section.bullets:
            out += [f"- {escape(bullet)}" for bullet in section.bullets] + [""]
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
