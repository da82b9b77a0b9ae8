"""The document model every builder renders, and ``from_markdown`` that reads one from Markdown.

Pydantic sits here because a document crosses the trust edge: its text comes from a model or a person.
Every string is cleaned on the way in (whitespace runs become one space; characters XML cannot carry —
control characters, lone surrogates — are dropped, so no builder can fail on them later), every size is
bounded by a named constant, and URLs are limited to ``http``/``https`` so a link can never run script.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal
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

MAX_TITLE_CHARS = 200
MAX_SUBTITLE_CHARS = 300
MAX_HEADING_CHARS = 150
MAX_SECTIONS = 200
MAX_BLOCKS = 200  # paragraphs, lists, tables… in one section (or one list item, one quote)
MAX_BULLETS = 200  # items of one list
MAX_ITEM_CHARS = 4_000  # one paragraph, list item or table cell
MAX_CODE_CHARS = 20_000  # one code block
MAX_TABLE_ROWS = 500
MAX_TABLE_COLUMNS = 20
MAX_NOTES_CHARS = 4_000
MAX_SOURCES = 100
MAX_SOURCE_TITLE_CHARS = 300
MAX_URL_CHARS = 2_000
MAX_DOCUMENT_CHARS = 300_000  # all the text of one document together
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


# -- blocks -----------------------------------------------------------------------------------------


def clean_span_text(value: Any) -> Any:
    """Inline text: characters XML cannot carry dropped, whitespace runs made one space, but the space at
    either end kept (``a **b** c`` is three spans whose spaces matter)."""
    if not isinstance(value, str):
        return value
    return re.sub(r"\s+", " ", "".join(ch for ch in value if _xml_safe(ch)))


def clean_code(value: Any) -> Any:
    """Code keeps every line and its indentation: tabs become four spaces, trailing blanks go."""
    if not isinstance(value, str):
        return value
    lines = ["".join(ch for ch in line if _xml_safe(ch) and ch != "\r").expandtabs(4).rstrip()
             for line in value.splitlines()]  # fmt: skip
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


class Span(BaseModel):
    """A run of inline text and its emphasis; ``link`` an http(s) URL it points to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: Annotated[str, BeforeValidator(clean_span_text), _length(1, MAX_ITEM_CHARS)]
    bold: bool = False
    italic: bool = False
    code: bool = False
    strike: bool = False
    link: Url | None = None

    def style(self) -> tuple[bool, bool, bool, bool, str | None]:
        return (self.bold, self.italic, self.code, self.strike, self.link)


def _style(span: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(span.get(key) or False for key in ("bold", "italic", "code", "strike", "link"))


def tidy_spans(value: Any) -> Any:
    """Spans as given, or a plain string as one span; neighbours of one style merged, the text trimmed
    at both ends, empty spans dropped — so one text has one span list, however it was written."""
    if isinstance(value, str):
        value = [{"text": value}]
    if not isinstance(value, list | tuple):
        return value
    spans: list[dict[str, Any]] = []
    for raw in value:
        item = dict(raw.model_dump() if isinstance(raw, Span) else raw) if not isinstance(raw, str) else {
            "text": raw}  # fmt: skip
        item["text"] = clean_span_text(item.get("text", ""))
        if not item["text"]:
            continue
        last = spans[-1] if spans else None
        if last is not None and _style(last) == _style(item):
            last["text"] += item["text"]
        else:
            spans.append(item)
    if spans:
        spans[0]["text"] = spans[0]["text"].lstrip()
        spans[-1]["text"] = spans[-1]["text"].rstrip()
    return [span for span in spans if span["text"]]


Spans = Annotated[tuple[Span, ...], BeforeValidator(tidy_spans)]


def plain(spans: Sequence[Span]) -> str:
    return "".join(span.text for span in spans)


class Paragraph(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["paragraph"] = "paragraph"
    spans: Annotated[Spans, Field(min_length=1)]

    @property
    def text(self) -> str:
        return plain(self.spans)


class Subheading(BaseModel):
    """A heading inside a section (``###`` and deeper)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["heading"] = "heading"
    level: Annotated[int, Field(ge=3, le=6)] = 3
    spans: Annotated[Spans, Field(min_length=1)]

    @property
    def text(self) -> str:
        return plain(self.spans)


class Code(BaseModel):
    """A code block: drawn in a monospace font, every line and its indentation kept."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["code"] = "code"
    text: Annotated[str, BeforeValidator(clean_code), _length(1, MAX_CODE_CHARS)]
    language: Annotated[str, _Clean, _length(0, 40)] = ""


Cell = Spans
Align = Literal["left", "center", "right", ""]


class Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["table"] = "table"
    header: Annotated[list[Cell], Field(min_length=1, max_length=MAX_TABLE_COLUMNS)]
    rows: Annotated[list[list[Cell]], Field(max_length=MAX_TABLE_ROWS)] = []
    align: list[Align] = []

    @model_validator(mode="after")
    def _rectangular(self) -> Table:
        width = len(self.header)
        rows = [list(row[:width]) + [()] * (width - len(row)) for row in self.rows]  # GFM pads and cuts
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "align", (list(self.align) + [""] * width)[:width])
        return self


class Image(BaseModel):
    """A picture: ``src`` as written; ``path`` the checked local file to draw (set only by a resolver
    that confined it, see ``reader.from_markdown``); without one the alt text stands in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["image"] = "image"
    src: Annotated[str, _Clean, _length(0, MAX_URL_CHARS)]
    alt: Annotated[str, _Clean, _length(0, MAX_ITEM_CHARS)] = ""
    path: str | None = None


class ListItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    blocks: Annotated[list[Block], Field(max_length=MAX_BLOCKS)] = []
    checked: bool | None = None


class ListBlock(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["list"] = "list"
    ordered: bool = False
    start: Annotated[int, Field(ge=0, le=999_999_999)] = 1
    items: Annotated[list[ListItem], Field(min_length=1, max_length=MAX_BULLETS)]


class Quote(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["quote"] = "quote"
    blocks: Annotated[list[Block], Field(min_length=1, max_length=MAX_BLOCKS)]


Block = Annotated[
    Paragraph | Subheading | Code | Table | Image | ListBlock | Quote, Field(discriminator="kind")
]
ListItem.model_rebuild()
Quote.model_rebuild()


def block_text(block: Paragraph | Subheading | Code | Table | Image | ListBlock | Quote) -> list[str]:
    """Every piece of text a block shows, in reading order."""
    if isinstance(block, Paragraph | Subheading | Code):
        return [block.text]
    if isinstance(block, Table):
        return [plain(cell) for row in (block.header, *block.rows) for cell in row if cell]
    if isinstance(block, Image):
        return [block.alt] if block.alt else []
    inner = [b for item in block.items for b in item.blocks] if isinstance(block, ListBlock) else block.blocks
    return [text for b in inner for text in block_text(b)]


def _legacy_blocks(data: Any) -> Any:
    """``paragraphs`` and ``bullets`` (the older flat shape, still handy for callers) as blocks."""
    if not isinstance(data, dict) or not ({"paragraphs", "bullets"} & data.keys()):
        return data
    data = dict(data)
    blocks = list(data.get("blocks", []))
    blocks += [{"kind": "paragraph", "spans": text} for text in data.pop("paragraphs", [])]
    bullets = data.pop("bullets", [])
    if bullets:
        items = [{"blocks": [{"kind": "paragraph", "spans": text}]} for text in bullets]
        blocks.append({"kind": "list", "items": items})
    data["blocks"] = blocks
    return data


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    heading: Heading = ""
    blocks: Annotated[list[Block], Field(max_length=MAX_BLOCKS)] = []
    notes: Notes = ""

    @model_validator(mode="before")
    @classmethod
    def _accept_flat(cls, data: Any) -> Any:
        return _legacy_blocks(data)

    @model_validator(mode="after")
    def _not_empty(self) -> Section:
        if not (self.heading or self.blocks):
            raise ValueError("a section needs a heading or some content")
        return self

    @property
    def paragraphs(self) -> list[str]:
        """The text of the section's top-level paragraphs."""
        return [block.text for block in self.blocks if isinstance(block, Paragraph)]

    @property
    def bullets(self) -> list[str]:
        """The text of the items of the section's top-level lists, each item as one line."""
        return [" ".join(text for b in item.blocks for text in block_text(b))
                for block in self.blocks if isinstance(block, ListBlock) for item in block.items]  # fmt: skip

    def texts(self) -> list[str]:
        return [text for block in self.blocks for text in block_text(block)]

    def text_chars(self) -> int:
        return len(self.heading) + sum(map(len, self.texts())) + len(self.notes)


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
            parts += [section.heading, *section.texts()]
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
