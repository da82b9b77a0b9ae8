"""``from_markdown``: CommonMark with GFM tables and strikethrough read into the document model.

Structure is kept, not flattened: ``#`` (or the highest heading level) is the title, the next level
starts sections and deeper headings stay inside them; paragraphs keep their bold, italic, code and
links as spans; lists keep their nesting, numbering and start; fenced and indented code keeps every
line; tables keep their rows, columns and alignment; images become image blocks, drawn when
``resolve_image`` confines their source to a real picture; quotes stay quotes, and one that begins
"Notes:"/"备注：" becomes the section's speaker notes. A "Sources"/"来源" section's links (and the
links in the text) become the document's sources. Whatever outgrows a limit continues in the next
section or block instead of being refused, so only the whole text's size is ever a reason to refuse.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tether.artifacts.document import (
    _URL_RE,
    MAX_BLOCKS,
    MAX_BULLETS,
    MAX_CODE_CHARS,
    MAX_HEADING_CHARS,
    MAX_ITEM_CHARS,
    MAX_MARKDOWN_CHARS,
    MAX_NOTES_CHARS,
    MAX_SECTIONS,
    MAX_SOURCES,
    MAX_TABLE_ROWS,
    NOTES_PREFIXES,
    SOURCE_HEADINGS,
    Document,
    DocumentError,
    Language,
    clean_line,
    clean_span_text,
    make_document,
)

if TYPE_CHECKING:
    from markdown_it.tree import SyntaxTreeNode

# Turns an image's ``src`` into a checked local file to draw, or None (then its alt text stands in).
ImageResolver = Callable[[str], "str | None"]
Raw = dict[str, Any]

_SENTENCE_END = re.compile(r"(?<=[。！？；!?;])|(?<=[.!?])\s+")
_CJK_END = re.compile(r"[。！？；]$")
_TAG_RE = re.compile(r"<[^>]*>")
_TASK_RE = re.compile(r"^\[([ xX])\]\s+")


def split_long(text: str, limit: int = MAX_ITEM_CHARS) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut after a sentence's end where there is one
    (a long Chinese paragraph has no line breaks), else at the limit."""
    if len(text) <= limit:
        return [text]
    pieces: list[str] = []
    current = ""
    for sentence in (s for s in _SENTENCE_END.split(text) if s):
        while len(sentence) > limit:  # one sentence longer than the limit: cut it
            if current:
                pieces.append(current.strip())
                current = ""
            pieces.append(sentence[:limit])
            sentence = sentence[limit:]
        if len(current) + len(sentence) + 1 > limit:
            pieces.append(current.strip())
            current = ""
        current = f"{current} {sentence}" if current and not _CJK_END.search(current) else current + sentence
    if current.strip():
        pieces.append(current.strip())
    return [piece for piece in pieces if piece]


def _chunks(spans: list[Raw]) -> list[list[Raw]]:
    """Spans in groups of at most ``MAX_ITEM_CHARS`` characters (a long paragraph becomes several)."""
    groups: list[list[Raw]] = [[]]
    used = 0
    for span in spans:
        for piece in split_long(span["text"]):
            if used + len(piece) > MAX_ITEM_CHARS and groups[-1]:
                groups.append([])
                used = 0
            groups[-1].append({**span, "text": piece})
            used += len(piece)
    return [group for group in groups if "".join(s["text"] for s in group).strip()]


def inline_parts(node: SyntaxTreeNode) -> list[Raw | tuple[str, str]]:
    """An inline node as spans, with ``("image", index)`` markers where pictures stand."""
    out: list[Raw | tuple[str, str]] = []
    state = {"bold": 0, "italic": 0, "strike": 0}
    links: list[str | None] = []
    tokens = node.token.children if node.token is not None else None
    for tok in tokens or []:
        kind = tok.type
        style = {"bold": state["bold"] > 0, "italic": state["italic"] > 0, "strike": state["strike"] > 0}
        link = next((href for href in reversed(links) if href), None)
        if kind in ("text", "code_inline"):
            out.append({"text": tok.content, **style, "code": kind == "code_inline", "link": link})
        elif kind in ("softbreak", "hardbreak"):
            out.append({"text": " ", **style, "link": link})
        elif kind in ("strong_open", "strong_close", "em_open", "em_close", "s_open", "s_close"):
            key = {"strong": "bold", "em": "italic", "s": "strike"}[kind.rsplit("_", 1)[0]]
            state[key] += 1 if kind.endswith("_open") else -1
        elif kind == "link_open":
            href = str(tok.attrs.get("href", ""))
            links.append(href if _URL_RE.match(href) else None)
        elif kind == "link_close" and links:
            links.pop()
        elif kind == "image":
            out.append(("image", str(tok.attrs.get("src", "")) + "\x00" + tok.content))
    return out


class _Reader:
    """Walks markdown-it's syntax tree and collects the title, sections and sources."""

    def __init__(self, title: str | None, resolve_image: ImageResolver | None) -> None:
        self.title = title
        self.subtitle = ""
        self.resolve_image = resolve_image
        self.sections: list[Raw] = []
        self.sources: list[dict[str, str]] = []
        self.links: list[dict[str, str]] = []
        self.in_sources = False
        self.seen_content = False
        self.section_level = 2
        self.title_level = 0  # the level of the one heading that is the title (0: none is)
        self.title_seen = False

    # -- where blocks go ------------------------------------------------------------------------

    def add(self, block: Raw) -> None:
        """Append a block to the current section; a full one continues under the same heading."""
        if not self.sections:
            self.sections.append({"heading": "", "blocks": [], "notes": ""})
        section = self.sections[-1]
        if len(section["blocks"]) >= MAX_BLOCKS:
            if len(self.sections) >= MAX_SECTIONS:
                raise DocumentError(
                    f"too long for one document: more than {MAX_SECTIONS} sections of at most "
                    f"{MAX_BLOCKS} blocks; split it into several documents"
                )
            section = {"heading": section["heading"], "blocks": [], "notes": ""}
            self.sections.append(section)
        self.seen_content = True
        section["blocks"].append(block)

    def heading(self, level: int, node: SyntaxTreeNode) -> None:
        spans = [part for part in inline_parts(node.children[0]) if isinstance(part, dict)]
        text = clean_line("".join(span["text"] for span in spans))
        if not text:
            return
        if level == self.title_level and not self.title_seen:
            self.title_seen = True
            if self.title is None:
                self.title = text
                return
            if text.casefold() == self.title.casefold():
                return  # a given title wins, and a heading that repeats it is not repeated
        if level > self.section_level:
            if not self.in_sources:
                self.add({"kind": "heading", "level": min(6, level - self.section_level + 2), "spans": spans})
            return
        self.seen_content = True
        self.in_sources = text.rstrip(":：").strip().casefold() in SOURCE_HEADINGS
        if self.in_sources:
            return
        if len(self.sections) >= MAX_SECTIONS:  # more headings than a document holds: kept inside
            self.add({"kind": "heading", "level": 3, "spans": spans})
            return
        self.sections.append({"heading": text[:MAX_HEADING_CHARS], "blocks": [], "notes": ""})

    # -- blocks ---------------------------------------------------------------------------------

    def blocks(self, nodes: list[SyntaxTreeNode], depth: int = 0) -> list[Raw]:
        """The blocks of ``nodes`` (the inside of a list item or a quote)."""
        out: list[Raw] = []
        for node in nodes:
            out += self.block(node, depth)
        return out

    def block(self, node: SyntaxTreeNode, depth: int) -> list[Raw]:
        kind = node.type
        if kind == "paragraph":
            return self.paragraph(node)
        if kind == "heading":  # a heading inside a list or quote stays a heading of that place
            spans = [p for p in inline_parts(node.children[0]) if isinstance(p, dict)]
            return [{"kind": "heading", "level": 3, "spans": spans}] if clean_line(_text(spans)) else []
        if kind in ("fence", "code_block"):
            return self.code(node)
        if kind == "html_block":  # its text is kept, its markup is not
            text = clean_line(_TAG_RE.sub(" ", html.unescape(node.content)))
            return [{"kind": "paragraph", "spans": [{"text": t}]} for t in split_long(text)] if text else []
        if kind in ("bullet_list", "ordered_list"):
            return self.list_block(node, depth)
        if kind == "table":
            return self.table(node)
        if kind == "blockquote":
            inner = self.blocks(node.children, depth)
            return [{"kind": "quote", "blocks": inner[:MAX_BLOCKS]}] if inner else []
        return []  # thematic breaks and anything unknown draw nothing

    def paragraph(self, node: SyntaxTreeNode) -> list[Raw]:
        out: list[Raw] = []
        spans: list[Raw] = []
        for part in inline_parts(node.children[0]) if node.children else []:
            if isinstance(part, dict):
                spans.append(part)
                continue
            out += [{"kind": "paragraph", "spans": group} for group in _chunks(spans)]
            spans = []
            src, _, alt = part[1].partition("\x00")
            path = self.resolve_image(src) if self.resolve_image is not None else None
            out.append(
                {"kind": "image", "src": src[:2000], "alt": clean_line(alt)[:MAX_ITEM_CHARS], "path": path}
            )
        out += [{"kind": "paragraph", "spans": group} for group in _chunks(spans)]
        if not self.in_sources:
            self.links += [link for block in out for _, found in _texts_and_links(block) for link in found]
        return out

    def code(self, node: SyntaxTreeNode) -> list[Raw]:
        language = clean_line((node.info or "").split(" ")[0])[:40] if node.type == "fence" else ""
        lines = node.content.splitlines()
        out: list[Raw] = []
        chunk: list[str] = []
        for line in lines:  # a very long listing continues in a second block, cut between lines
            if chunk and sum(len(x) + 1 for x in chunk) + len(line) > MAX_CODE_CHARS:
                out.append({"kind": "code", "text": "\n".join(chunk), "language": language})
                chunk = []
            chunk.append(line[:MAX_CODE_CHARS])
        if any(line.strip() for line in chunk):
            out.append({"kind": "code", "text": "\n".join(chunk), "language": language})
        return out

    def list_block(self, node: SyntaxTreeNode, depth: int) -> list[Raw]:
        ordered = node.type == "ordered_list"
        start = int(node.attrs.get("start", 1)) if ordered else 1
        items: list[Raw] = []
        for child in node.children:
            inner = self.blocks(child.children, depth + 1)
            checked = None
            first = inner[0] if inner else None
            if first and first["kind"] == "paragraph" and first["spans"]:
                match = _TASK_RE.match(first["spans"][0]["text"])
                if match:
                    checked = match.group(1) != " "
                    first["spans"][0] = {
                        **first["spans"][0],
                        "text": first["spans"][0]["text"][match.end() :],
                    }
            items.append({"blocks": inner[:MAX_BLOCKS], "checked": checked})
        out = []
        for index in range(0, len(items), MAX_BULLETS):  # a list longer than the limit goes on as a second
            out.append(
                {
                    "kind": "list",
                    "ordered": ordered,
                    "start": start + index,
                    "items": items[index : index + MAX_BULLETS],
                }
            )
        return out

    def table(self, node: SyntaxTreeNode) -> list[Raw]:
        rows: list[list[list[Raw]]] = []
        align: list[str] = []
        for part in node.children:  # thead, tbody
            for tr in part.children:
                cells = []
                for cell in tr.children:
                    spans = (
                        [p for p in inline_parts(cell.children[0]) if isinstance(p, dict)]
                        if cell.children
                        else []
                    )
                    cells.append(_chunks(spans)[0] if _chunks(spans) else [])
                    if part.type == "thead":
                        style = str(cell.attrs.get("style", ""))
                        align.append(style.removeprefix("text-align:") if style else "")
                rows.append(cells)
        if not rows:
            return []
        header, body = rows[0], rows[1:]
        return [
            {"kind": "table", "header": header, "rows": body[i : i + MAX_TABLE_ROWS], "align": align}
            for i in range(0, max(len(body), 1), MAX_TABLE_ROWS)
        ]

    # -- top level ------------------------------------------------------------------------------

    def top(self, node: SyntaxTreeNode) -> None:
        if node.type == "heading":
            self.heading(int(node.tag[1:]), node)
            return
        if self.in_sources:
            self.source_block(node)
            return
        if node.type == "blockquote" and self.notes(node):
            return
        if node.type == "paragraph" and self.maybe_subtitle(node):
            return
        for block in self.block(node, 0):
            self.add(block)

    def maybe_subtitle(self, node: SyntaxTreeNode) -> bool:
        if self.seen_content or self.sections or not self.title or self.subtitle:
            return False
        tokens = node.children[0].token.children if node.children and node.children[0].token else None
        kinds = [tok.type for tok in tokens or []]
        if (
            len(kinds) >= 3
            and kinds[0] == "em_open"
            and kinds[-1] == "em_close"
            and "em_open" not in kinds[1:]
        ):
            self.subtitle = clean_line("".join(tok.content for tok in tokens or [] if tok.type == "text"))
            return bool(self.subtitle)
        return False

    def notes(self, node: SyntaxTreeNode) -> bool:
        texts = [
            _text([p for p in inline_parts(child.children[0]) if isinstance(p, dict)])
            for child in node.children
            if child.type == "paragraph" and child.children
        ]
        first = clean_line(texts[0]) if texts else ""
        prefix = next((p for p in NOTES_PREFIXES if first.casefold().startswith(p)), None)
        if prefix is None:
            return False
        lines = [first[len(prefix) :].strip(), *(clean_line(t) for t in texts[1:])]
        if not self.sections:
            self.sections.append({"heading": "", "blocks": [], "notes": ""})
        section = self.sections[-1]
        section["notes"] = (section["notes"] + "\n" + "\n".join(lines)).strip()[:MAX_NOTES_CHARS]
        return True

    def source_block(self, node: SyntaxTreeNode) -> None:
        for block in self.block(node, 0):
            for text, links in _texts_and_links(block):
                self.source(text, links)

    def source(self, text: str, links: list[dict[str, str]]) -> None:
        if links:
            self.sources.extend(links)
            return
        bare = re.search(r"https?://\S+", text)
        if bare:
            url = bare.group(0).rstrip(".,;)）。，")
            title = text.replace(bare.group(0), "").strip(" -–—:：|") or url
            self.sources.append({"title": title, "url": url})


def _text(spans: list[Raw]) -> str:
    return "".join(span["text"] for span in spans)


def _texts_and_links(block: Raw) -> list[tuple[str, list[dict[str, str]]]]:
    """Each paragraph of a block (a list's items too) with the links in it, titled by their text."""
    if block["kind"] == "paragraph":
        links: dict[str, list[str]] = {}
        previous = None
        for span in block["spans"]:  # a link's text is its spans in a row; the first link to a URL names it
            url = span.get("link")
            if url and (url not in links or previous == url):
                links.setdefault(url, []).append(span["text"])
            previous = url
        found = [{"title": clean_line("".join(t)) or url, "url": url} for url, t in links.items()]
        return [(clean_line(_text(block["spans"])), found)]
    inner = [b for item in block.get("items", []) for b in item["blocks"]] + block.get("blocks", [])
    return [pair for b in inner for pair in _texts_and_links(b)]


def from_markdown(
    text: str,
    title: str | None = None,
    language: Language | None = None,
    resolve_image: ImageResolver | None = None,
) -> Document:
    """Read a document from Markdown (see the module docstring). ``DocumentError`` when it is longer
    than ``MAX_MARKDOWN_CHARS``, holds no title, or outgrows the model's limits."""
    if len(text) > MAX_MARKDOWN_CHARS:
        raise DocumentError(
            f"the Markdown is {len(text)} characters long; the limit is {MAX_MARKDOWN_CHARS} "
            "(MAX_MARKDOWN_CHARS): split it into several documents"
        )
    from markdown_it import MarkdownIt
    from markdown_it.tree import SyntaxTreeNode

    root = SyntaxTreeNode(MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(text))
    reader = _Reader(clean_line(title) if title is not None else None, resolve_image)
    heads = [int(node.tag[1:]) for node in root.children if node.type == "heading"]
    if heads:
        top = min(heads)
        if heads.count(top) == 1 and heads[0] == top:
            # One top heading before any other ("# Title"): the title; the next level starts sections.
            below = sorted({level for level in heads if level > top})
            reader.title_level = top
            reader.section_level = below[0] if below else top + 1
        else:  # several top headings ("## A", "## B"): each starts a section
            reader.section_level = top
    for node in root.children:
        reader.top(node)
    return _finish(reader, language)


def _finish(reader: _Reader, language: Language | None) -> Document:
    known = {source["url"] for source in reader.sources}
    for link in reader.links:
        if link["url"] not in known:
            known.add(link["url"])
            reader.sources.append(link)
    sections = [section for section in reader.sections if section["heading"] or section["blocks"]]
    doc_title = reader.title or next((section["heading"] for section in sections if section["heading"]), None)
    if not doc_title:
        raise DocumentError("the document has no title: pass one, or start the Markdown with '# Title'")
    return make_document(
        title=doc_title,
        subtitle=reader.subtitle,
        language=language,
        sections=sections,
        sources=reader.sources[:MAX_SOURCES],
    )


__all__ = ["ImageResolver", "clean_span_text", "from_markdown", "split_long"]
