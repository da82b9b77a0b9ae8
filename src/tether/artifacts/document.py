"""The document model every builder renders, and ``from_markdown`` that reads one from Markdown.

Pydantic sits here because a document crosses the trust edge: its text comes from a model or a person.
Every string is cleaned on the way in (whitespace runs become one space; characters XML cannot carry —
control characters, lone surrogates — are dropped, so no builder can fail on them later), every size is
bounded by a named constant, and URLs are limited to ``http``/``https`` so a link can never run script.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from tether.errors import TetherError

if TYPE_CHECKING:
    from markdown_it.token import Token

MAX_TITLE_CHARS = 200
MAX_SUBTITLE_CHARS = 300
MAX_HEADING_CHARS = 150
MAX_SECTIONS = 80
MAX_PARAGRAPHS = 40  # per section
MAX_BULLETS = 80  # per section
MAX_ITEM_CHARS = 2_000  # one paragraph or bullet
MAX_NOTES_CHARS = 4_000
MAX_SOURCES = 100
MAX_SOURCE_TITLE_CHARS = 300
MAX_URL_CHARS = 2_000
MAX_DOCUMENT_CHARS = 150_000  # all the text of one document together
MAX_MARKDOWN_CHARS = 200_000  # the Markdown handed to from_markdown

Language = Literal["zh", "en"]

# Headings that mark a list of sources (compared case-insensitively, trailing colons ignored).
SOURCE_HEADINGS = frozenset(
    {"sources", "source", "references", "reference", "bibliography", "links", "citations",
     "来源", "参考", "参考资料", "参考文献", "资料来源", "引用", "出处", "链接"}
)  # fmt: skip
NOTES_PREFIXES = ("notes:", "note:", "speaker notes:", "备注：", "备注:", "讲者备注：", "讲稿：")

_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_LATIN_RE = re.compile(r"[A-Za-z]")
_URL_RE = re.compile(r"^https?://[^\s<>\"{}|\\^`\x00-\x1f\x7f]+$", re.IGNORECASE)


class DocumentError(TetherError):
    """A document that cannot be built: too big, badly formed, or a format that is not offered."""

    code = "document"


def _xml_safe(char: str) -> bool:
    point = ord(char)
    return (
        point in (0x9, 0xA, 0xD)
        or 0x20 <= point <= 0xD7FF
        or 0xE000 <= point <= 0xFFFD
        or 0x10000 <= point <= 0x10FFFF
    ) and not (0x7F <= point <= 0x9F)


def clean_line(value: Any) -> Any:
    """One line of text: characters XML cannot carry dropped, whitespace runs made one space."""
    if not isinstance(value, str):
        return value
    return " ".join("".join(ch for ch in value if _xml_safe(ch)).split())


def clean_block(value: Any) -> Any:
    """Text that keeps its line breaks (speaker notes): each line cleaned, blank runs made one."""
    if not isinstance(value, str):
        return value
    lines = [clean_line(line) for line in value.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _check_url(value: str) -> str:
    if not _URL_RE.match(value) or not urlsplit(value).netloc:
        raise ValueError("a source URL must be an http:// or https:// address without spaces or quotes")
    return value


def _length(low: int, high: int) -> AfterValidator:
    def check(value: str) -> str:
        if not low <= len(value) <= high:
            wanted = f"at most {high} characters" if low == 0 else f"{low} to {high} characters"
            raise ValueError(f"must be {wanted} (this one has {len(value)})")
        return value

    return AfterValidator(check)


_Clean = BeforeValidator(clean_line)
Item = Annotated[str, _Clean, _length(1, MAX_ITEM_CHARS)]
Title = Annotated[str, _Clean, _length(1, MAX_TITLE_CHARS)]
Subtitle = Annotated[str, _Clean, _length(0, MAX_SUBTITLE_CHARS)]
Heading = Annotated[str, _Clean, _length(0, MAX_HEADING_CHARS)]
Notes = Annotated[str, BeforeValidator(clean_block), _length(0, MAX_NOTES_CHARS)]
SourceTitle = Annotated[str, _Clean, _length(1, MAX_SOURCE_TITLE_CHARS)]
Url = Annotated[str, _Clean, _length(1, MAX_URL_CHARS), AfterValidator(_check_url)]


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    title: SourceTitle
    url: Url


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    heading: Heading = ""
    paragraphs: Annotated[list[Item], Field(max_length=MAX_PARAGRAPHS)] = []
    bullets: Annotated[list[Item], Field(max_length=MAX_BULLETS)] = []
    notes: Notes = ""

    @model_validator(mode="after")
    def _not_empty(self) -> Section:
        if not (self.heading or self.paragraphs or self.bullets):
            raise ValueError("a section needs a heading, a paragraph or a bullet")
        return self

    def text_chars(self) -> int:
        body = sum(map(len, self.paragraphs)) + sum(map(len, self.bullets))
        return len(self.heading) + body + len(self.notes)


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    title: Title
    subtitle: Subtitle = ""
    language: Language | None = None
    sections: Annotated[list[Section], Field(max_length=MAX_SECTIONS)] = []
    sources: Annotated[list[Source], Field(max_length=MAX_SOURCES)] = []

    @model_validator(mode="after")
    def _bounded(self) -> Document:
        total = len(self.title) + len(self.subtitle) + sum(section.text_chars() for section in self.sections)
        total += sum(len(source.title) + len(source.url) for source in self.sources)
        if total > MAX_DOCUMENT_CHARS:
            raise ValueError(f"the document holds {total} characters of text; at most {MAX_DOCUMENT_CHARS}")
        if self.language is None:
            object.__setattr__(self, "language", detect_language(self.all_text()))
        return self

    @property
    def lang(self) -> Language:
        """The language, always set once validated (detected when it was not given)."""
        return self.language or "en"

    def all_text(self) -> str:
        parts = [self.title, self.subtitle]
        for section in self.sections:
            parts += [section.heading, *section.paragraphs, *section.bullets]
        return "\n".join(parts)


def detect_language(text: str) -> Language:
    """``zh`` when Chinese characters carry a fair share of the text (a CJK character is about a word;
    a Latin word about five letters), else ``en``."""
    cjk = len(_CJK_RE.findall(text))
    latin = len(_LATIN_RE.findall(text))
    return "zh" if cjk and cjk * 5 >= latin else "en"


def explain(exc: ValidationError) -> str:
    """A validation error as sentences a person (or a model) can act on: where, and what is allowed."""
    problems = []
    for error in exc.errors(include_url=False)[:5]:
        where = ".".join(str(part) for part in error["loc"]) or "document"
        problems.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
    more = exc.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def make_document(**fields: Any) -> Document:
    """``Document(**fields)``, with a ``DocumentError`` that says what is wrong instead of a traceback."""
    try:
        return Document.model_validate(fields)
    except ValidationError as exc:
        raise DocumentError(f"the document is not valid: {explain(exc)}") from exc


# -- Markdown ---------------------------------------------------------------------------------------


_SENTENCE_END = re.compile(r"(?<=[。！？；!?;])|(?<=[.!?])\s+")


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


_CJK_END = re.compile(r"[。！？；]$")


class _Reader:
    """Walks markdown-it's token stream and collects sections, bullets and sources."""

    def __init__(self, title: str | None) -> None:
        self.title = title
        self.subtitle = ""
        self.sections: list[dict[str, Any]] = []
        self.sources: list[dict[str, str]] = []
        self.links: list[dict[str, str]] = []
        self.in_sources = False
        self.seen_content = False
        self.in_notes = False  # inside a quote that began "Notes:": its later paragraphs are notes too

    def current(self, kind: str = "") -> dict[str, Any]:
        """The section text goes to; a full one (``kind`` at its limit) continues in a new section under
        the same heading, while there is room for sections."""
        if not self.sections:
            self.sections.append({"heading": "", "paragraphs": [], "bullets": [], "notes": ""})
        section = self.sections[-1]
        limit = {"paragraphs": MAX_PARAGRAPHS, "bullets": MAX_BULLETS}.get(kind)
        if limit is not None and len(section[kind]) >= limit:
            if len(self.sections) >= MAX_SECTIONS:
                raise DocumentError(
                    f"too long for one document: more than {MAX_SECTIONS} sections of at most "
                    f"{MAX_PARAGRAPHS} paragraphs and {MAX_BULLETS} bullets; split it into several documents"
                )
            section = {"heading": section["heading"], "paragraphs": [], "bullets": [], "notes": ""}
            self.sections.append(section)
        return section

    def heading(self, level: int, text: str) -> None:
        if level == 1 and not self.seen_content and not self.sections:
            if self.title is None:
                self.title = text
                return
            if text.casefold() == self.title.casefold():
                return
        self.seen_content = True
        self.in_sources = text.rstrip(":：").strip().casefold() in SOURCE_HEADINGS
        if self.in_sources:
            return
        if len(self.sections) >= MAX_SECTIONS:  # more headings than a document holds: kept as text
            self.current("paragraphs")["paragraphs"].append(text[:MAX_ITEM_CHARS])
            return
        self.sections.append(
            {"heading": text[:MAX_HEADING_CHARS], "paragraphs": [], "bullets": [], "notes": ""}
        )

    def paragraph(self, text: str, links: list[dict[str, str]], subtitle: bool, quoted: bool) -> None:
        if not text:
            return
        if subtitle and not self.seen_content and not self.sections and self.title and not self.subtitle:
            self.subtitle = text
            return
        self.seen_content = True
        if self.in_sources:
            self.source(text, links)
            return
        self.links += links
        lowered = text.casefold()
        prefix = next((p for p in NOTES_PREFIXES if lowered.startswith(p)), None) if quoted else None
        if prefix is not None or (quoted and self.in_notes):
            self.in_notes = True
            note = text[len(prefix) :] if prefix is not None else text
            section = self.current()
            section["notes"] = (section["notes"] + "\n" + note.strip()).strip()[:MAX_NOTES_CHARS]
            return
        for piece in split_long(text):
            self.current("paragraphs")["paragraphs"].append(piece)

    def bullet(self, text: str, links: list[dict[str, str]]) -> None:
        if not text:
            return
        self.seen_content = True
        if self.in_sources:
            self.source(text, links)
            return
        self.links += links
        for piece in split_long(text):
            self.current("bullets")["bullets"].append(piece)

    def source(self, text: str, links: list[dict[str, str]]) -> None:
        if links:
            for link in links:
                self.sources.append(link)
            return
        bare = re.search(r"https?://\S+", text)
        if bare:
            url = bare.group(0).rstrip(".,;)）。，")
            title = text.replace(bare.group(0), "").strip(" -–—:：|") or url
            self.sources.append({"title": title, "url": url})


_TAG_RE = re.compile(r"<[^>]*>")


def _inline(token: Token) -> tuple[str, list[dict[str, str]], bool]:
    """Plain text of an inline token, the links in it, and whether it is one emphasised span."""
    parts: list[str] = []
    links: list[dict[str, str]] = []
    href: str | None = None
    link_text: list[str] = []
    children = token.children or []
    for child in children:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
            if href is not None:
                link_text.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(child.content)
        elif child.type == "link_open":
            href = str(child.attrs.get("href", ""))
            link_text = []
        elif child.type == "link_close" and href is not None:
            if _URL_RE.match(href):
                links.append({"title": clean_line("".join(link_text)) or href, "url": href})
            href = None
    kinds = [child.type for child in children]
    emphasised = len(kinds) >= 3 and kinds[0] == "em_open" and kinds[-1] == "em_close"
    emphasised = emphasised and "em_open" not in kinds[1:]
    return clean_line("".join(parts)), links, emphasised


def from_markdown(text: str, title: str | None = None, language: Language | None = None) -> Document:
    """Read a document from Markdown: the first ``#`` heading is the title (unless ``title`` is given),
    an emphasised paragraph right under it the subtitle, other headings start sections, list items
    become bullets, a "Sources"/"来源"/"参考" section (or links in the text) become the sources, and a
    quote starting "Notes:"/"备注：" becomes the section's speaker notes. Text before the first
    heading is a section without a heading. ``DocumentError`` when it is too big or holds nothing.
    """
    if len(text) > MAX_MARKDOWN_CHARS:
        raise DocumentError(f"the Markdown is {len(text)} characters long; at most {MAX_MARKDOWN_CHARS}")
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    reader = _Reader(clean_line(title) if title is not None else None)
    list_depth = quote_depth = in_item = in_heading = in_table = heading_level = 0
    row: list[str] = []
    for token in tokens:
        kind = token.type
        if kind == "heading_open":
            in_heading, heading_level = 1, int(token.tag[1:])
        elif kind == "heading_close":
            in_heading = 0
        elif kind in ("bullet_list_open", "ordered_list_open"):
            list_depth += 1
        elif kind in ("bullet_list_close", "ordered_list_close"):
            list_depth -= 1
        elif kind == "list_item_open":
            in_item += 1
        elif kind == "list_item_close":
            in_item -= 1
        elif kind == "blockquote_open":
            quote_depth += 1
        elif kind == "blockquote_close":
            quote_depth -= 1
            reader.in_notes = False
        elif kind == "table_open":
            in_table += 1
        elif kind == "table_close":
            in_table -= 1
        elif kind == "tr_open":
            row = []
        elif kind == "tr_close":
            reader.bullet(" · ".join(cell for cell in row if cell), [])
        elif kind in ("fence", "code_block"):
            reader.paragraph(clean_line(token.content), [], False, False)
        elif kind == "html_block":  # its text is kept, its markup is not
            reader.paragraph(clean_line(_TAG_RE.sub(" ", html.unescape(token.content))), [], False, False)
        elif kind == "inline":
            plain, links, emphasised = _inline(token)
            if in_heading:
                reader.heading(heading_level, plain)
            elif in_table:
                row.append(plain)
            elif list_depth and in_item:
                reader.bullet(plain, links)
            else:
                reader.paragraph(plain, links, emphasised, quote_depth > 0)
    known = {source["url"] for source in reader.sources}
    for link in reader.links:
        if link["url"] not in known:
            known.add(link["url"])
            reader.sources.append(link)
    sections = [section for section in reader.sections if section["heading"] or section["paragraphs"]
                or section["bullets"]]  # fmt: skip
    doc_title = reader.title or (sections[0]["heading"] if sections and sections[0]["heading"] else None)
    if not doc_title:
        raise DocumentError("the document has no title: pass one, or start the Markdown with '# Title'")
    return make_document(
        title=doc_title, subtitle=reader.subtitle, language=language, sections=sections,
        sources=reader.sources[:MAX_SOURCES],
    )  # fmt: skip
