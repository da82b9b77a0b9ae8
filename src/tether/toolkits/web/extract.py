"""A fetched body as a title and its main text: HTML through trafilatura (a plain extraction when it
finds nothing), PDF through pypdf, text types as they are. Heavy libraries load on first use."""

from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass
from html.parser import HTMLParser

from tether.errors import TaskFailed
from tether.toolkits.web.fetch import Fetched, decode

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset(
    {"text/plain", "text/markdown", "text/x-markdown", "text/csv", "application/json", "text/xml",
     "application/xml", "application/rss+xml", "application/atom+xml"}
)  # fmt: skip
PDF_TYPES = frozenset({"application/pdf", "application/x-pdf"})
MAX_PDF_PAGES = 500
MAX_TITLE_CHARS = 300


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    title: str
    text: str
    kind: str  # "html", "pdf" or "text"
    charset: str | None = None
    extractor: str = ""  # what found the text: trafilatura, plain, pypdf, as-is
    pages: int | None = None  # a PDF's page count


def extract(fetched: Fetched) -> Page:
    """The readable content of ``fetched``; ``TaskFailed`` for a type that is not a document."""
    media = fetched.content_type
    body = fetched.body
    if media in PDF_TYPES or body.startswith(b"%PDF-"):
        if fetched.truncated:
            raise TaskFailed(
                f"the PDF at {fetched.url} is larger than the read limit of {len(body):,} bytes "
                "([research] fetch_max_bytes); a cut PDF cannot be read",
                url=fetched.url,
            )
        return pdf_page(body)
    if media in HTML_TYPES or (
        media in ("", "text/plain", "application/octet-stream") and _looks_like_html(body)
    ):
        text, charset = decode(body, fetched.charset)
        return html_page(text, url=fetched.url, charset=charset)
    if media in TEXT_TYPES or media.startswith("text/") or media.endswith(("+json", "+xml")):
        text, charset = decode(body, fetched.charset)
        return Page(title="", text=text.strip(), kind="text", charset=charset, extractor="as-is")
    raise TaskFailed(
        f"{fetched.url} is {media or 'of no stated type'}: only web pages (HTML), text and PDF documents "
        "can be read",
        url=fetched.url,
        content_type=media,
    )


def _looks_like_html(body: bytes) -> bool:
    head = body[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<body" in head or b"<head" in head


def html_page(markup: str, *, url: str | None = None, charset: str | None = None) -> Page:
    import trafilatura

    # No metadata: nothing here uses its author, date or site name, and its date search makes dateparser
    # try each of its ~200 locales on a page in Chinese (over a second of CPU in a fresh worker).
    document = trafilatura.bare_extraction(
        markup, url=url, with_metadata=False, include_comments=False, include_tables=True
    )
    plain_title, plain_text = plain_extraction(markup)
    text = getattr(document, "text", None) or ""
    extractor = "trafilatura"
    if not text.strip():
        text, extractor = plain_text, "plain"
    # The page's own <title> says what it is; guesses from meta tags and headings only stand in for it.
    title = plain_title or guessed_title(markup)
    return Page(
        title=_one_line(title)[:MAX_TITLE_CHARS],
        text=text.strip(),
        kind="html",
        charset=charset,
        extractor=extractor,
    )


def guessed_title(markup: str) -> str:
    """The title trafilatura's metadata would give (OpenGraph and meta tags, JSON-LD, then the h1 or
    h2), without the rest of its metadata."""
    from trafilatura.metadata import examine_meta, extract_meta_json, extract_title
    from trafilatura.utils import load_html

    tree = load_html(markup)
    if tree is None:
        return ""
    found = examine_meta(tree)
    try:
        found = extract_meta_json(tree, found)
    except Exception:  # trafilatura guards this call the same way: its JSON-LD reader can trip on odd data
        pass
    return found.title or extract_title(tree) or ""


class _PlainText(HTMLParser):
    """Every visible text node, with block elements on their own lines; the ``<title>`` apart."""

    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
    BLOCKS = frozenset(
        {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre",
         "blockquote", "table", "ul", "ol", "dd", "dt", "hr", "header", "footer", "main", "nav"}
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self.skipping = 0
        self.in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif not self.skipping:
            self.parts.append(data)


def plain_extraction(markup: str) -> tuple[str, str]:
    """(title, text) with no judgement about what is the main content."""
    parser = _PlainText()
    try:
        parser.feed(markup)
        parser.close()
    except (AssertionError, ValueError):  # html.parser gives up on some broken markup; keep what it read
        pass
    lines = (re.sub(r"[ \t\r\f\v\u00a0]+", " ", line).strip() for line in "".join(parser.parts).split("\n"))
    text = "\n".join(line for line in lines if line)
    return _one_line(html.unescape("".join(parser.title))), text


def pdf_page(body: bytes) -> Page:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body))
        if reader.is_encrypted:
            try:
                reader.decrypt("")
            except Exception as exc:
                raise TaskFailed(f"the PDF is encrypted and cannot be read ({exc})") from exc
        pages = reader.pages
        texts = [page.extract_text() or "" for page in list(pages)[:MAX_PDF_PAGES]]
        metadata = reader.metadata
        title = str(metadata.title) if metadata is not None and metadata.title else ""
    except TaskFailed:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise TaskFailed(f"the PDF could not be read ({type(exc).__name__}: {exc})") from exc
    text = "\n\n".join(t.strip() for t in texts if t.strip())
    if not title:
        title = next((line.strip() for line in text.splitlines() if line.strip()), "")
    note = ""
    if len(pages) > MAX_PDF_PAGES:
        note = f"\n\n[only the first {MAX_PDF_PAGES} of {len(pages)} pages were read]"
    return Page(
        title=_one_line(title)[:MAX_TITLE_CHARS],
        text=text + note,
        kind="pdf",
        extractor="pypdf",
        pages=len(pages),
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())
