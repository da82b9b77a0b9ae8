"""HTML out: ``to_html(doc)``, one self-contained, printable page.

No scripts, no external requests: the CSS is inline, fonts come from the reader's system (Noto Sans
CJK first, then the usual Chinese system fonts), every piece of text and every URL is escaped, and
links are only the ``http``/``https`` URLs the document model let through. The same page is what
``pdf.write_pdf`` prints (A4, page numbers in the footer).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

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

AnyBlock = Paragraph | Subheading | Code | Table | Image | ListBlock | Quote
IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"))
MONO_STACK = '"Noto Sans Mono CJK SC", "DejaVu Sans Mono", "Liberation Mono", ui-monospace, monospace'

FONT_STACK = (
    '"Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "PingFang SC", "Hiragino Sans GB", '
    '"Microsoft YaHei", "WenQuanYi Micro Hei", system-ui, sans-serif'
)
LABELS = {
    "zh": {"sources": "来源", "notes": "备注", "page": "第 {page} 页 / 共 {pages} 页"},
    "en": {"sources": "Sources", "notes": "Notes", "page": "Page {page} of {pages}"},
}

CSS = """
@page { size: A4; margin: 20mm 18mm 22mm 18mm;
  @bottom-center { content: PAGE_LABEL; font-family: FONTS; font-size: 9pt; color: #6b7280; } }
* { box-sizing: border-box; }
html { font-family: FONTS; color: #1f2937; line-height: 1.65; font-size: 11pt;
  -webkit-print-color-adjust: exact; print-color-adjust: exact; }
body { margin: 0 auto; max-width: 48rem; padding: 2rem 1.5rem; }
header { border-bottom: 2px solid #2563eb; margin-bottom: 1.5rem; padding-bottom: 0.75rem; }
h1 { font-size: 1.9rem; line-height: 1.3; margin: 0 0 0.4rem; }
.subtitle { color: #6b7280; font-size: 1.1rem; margin: 0; }
h2 { font-size: 1.3rem; line-height: 1.35; margin: 1.6rem 0 0.5rem; break-after: avoid; }
p, li { overflow-wrap: anywhere; }
:lang(zh) p, :lang(zh) li { line-break: strict; text-align: justify; }
ul, ol { padding-left: 1.4rem; }
li { margin: 0.2rem 0; }
aside.notes { border-left: 3px solid #e5e7eb; color: #4b5563; font-size: 0.92rem; margin: 0.8rem 0;
  padding: 0.2rem 0.8rem; white-space: pre-line; }
.sources li { margin: 0.4rem 0; }
.sources a { color: #1d4ed8; text-decoration: none; }
h3, h4, h5, h6 { font-size: 1.08rem; margin: 1.2rem 0 0.4rem; break-after: avoid; }
code, pre { font-family: MONO; font-size: 0.88em; }
code { background: #f1f5f9; border-radius: 3px; padding: 0 0.2em; }
pre { background: #f8fafc; border: 1px solid #e5e7eb; border-radius: 4px; padding: 0.6rem 0.8rem;
  white-space: pre-wrap; overflow-wrap: anywhere; line-height: 1.45; }
pre code { background: none; padding: 0; font-size: 1em; }
table { border-collapse: collapse; margin: 0.8rem 0; width: 100%; font-size: 0.92rem; }
th, td { border: 1px solid #d1d5db; padding: 0.3rem 0.5rem; text-align: left; vertical-align: top;
  overflow-wrap: anywhere; }
th { background: #f1f5f9; }
thead { display: table-header-group; }
tr { break-inside: avoid; }
figure { margin: 0.8rem 0; text-align: center; break-inside: avoid; }
figure img { max-width: 100%; max-height: 180mm; }
figcaption { color: #6b7280; font-size: 0.85rem; }
blockquote { border-left: 3px solid #cbd5e1; color: #4b5563; margin: 0.8rem 0; padding: 0 0.8rem; }
li > ul, li > ol { margin: 0.1rem 0; }
.url { color: #6b7280; display: block; font-size: 0.85rem; overflow-wrap: anywhere; }
@media print { body { max-width: none; padding: 0; } a { color: inherit; } }
"""


def _css(lang: str) -> str:
    page = LABELS[lang]["page"].replace("{page}", '" counter(page) "')
    page = page.replace("{pages}", '" counter(pages) "')
    return (
        CSS.replace("MONO", MONO_STACK)
        .replace("FONTS", FONT_STACK)
        .replace("PAGE_LABEL", f'"{page}"')
        .strip()
    )


def _spans(spans: Sequence[Span], keep: Callable[[str], str]) -> str:
    out = []
    for span in spans:
        text = escape(keep(span.text))
        if span.code:
            text = f"<code>{text}</code>"
        if span.strike:
            text = f"<s>{text}</s>"
        if span.italic:
            text = f"<em>{text}</em>"
        if span.bold:
            text = f"<strong>{text}</strong>"
        if span.link:
            text = f'<a href="{escape(span.link)}" rel="noreferrer">{text}</a>'
        out.append(text)
    return "".join(out)


def image_data_uri(path: str) -> str | None:
    """A checked picture as a ``data:`` URI (the page stays self-contained), None when it is gone."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    mime = next((m for magic, m in IMAGE_MAGIC if data.startswith(magic)), None)
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}" if mime else None


def _block(block: AnyBlock, keep: Callable[[str], str]) -> list[str]:
    if isinstance(block, Paragraph):
        return [f"<p>{_spans(block.spans, keep)}</p>"]
    if isinstance(block, Subheading):
        return [f"<h{block.level}>{_spans(block.spans, keep)}</h{block.level}>"]
    if isinstance(block, Code):
        language = f' class="language-{escape(block.language)}"' if block.language else ""
        return [f"<pre><code{language}>{escape(keep(block.text))}</code></pre>"]
    if isinstance(block, Table):
        return _table(block, keep)
    if isinstance(block, Image):
        uri = image_data_uri(block.path) if block.path else None
        alt = escape(keep(block.alt))
        if uri is None:
            return [f'<p class="image-missing">[{alt or escape(block.src)}]</p>'] if alt or block.src else []
        caption = f"<figcaption>{alt}</figcaption>" if alt else ""
        return [f'<figure><img src="{uri}" alt="{alt}">{caption}</figure>']
    if isinstance(block, Quote):
        return ["<blockquote>", *_blocks(block.blocks, keep), "</blockquote>"]
    tag = "ol" if block.ordered else "ul"
    start = ""
    if block.ordered and block.start != 1:  # WeasyPrint numbers from the counter, not the attribute
        start = f' start="{block.start}" style="counter-reset: list-item {block.start - 1}"'

    out = [f"<{tag}{start}>"]
    for item in block.items:
        box = "" if item.checked is None else ("☑ " if item.checked else "☐ ")
        inner = item.blocks
        if len(inner) >= 1 and isinstance(inner[0], Paragraph):  # a tight item: its text, no <p>
            out.append(f"<li>{box}{_spans(inner[0].spans, keep)}")
            out += _blocks(inner[1:], keep)
        else:
            out += [f"<li>{box}", *_blocks(inner, keep)]
        out.append("</li>")
    return [*out, f"</{tag}>"]


def _table(table: Table, keep: Callable[[str], str]) -> list[str]:
    def cells(row: Sequence[Sequence[Span]], tag: str) -> str:
        parts = []
        for cell, align in zip(row, table.align, strict=False):
            style = f' style="text-align:{align}"' if align else ""
            parts.append(f"<{tag}{style}>{_spans(cell, keep)}</{tag}>")
        return "<tr>" + "".join(parts) + "</tr>"

    body = [cells(row, "td") for row in table.rows]
    return [
        "<table>",
        f"<thead>{cells(table.header, 'th')}</thead>",
        "<tbody>",
        *body,
        "</tbody>",
        "</table>",
    ]


def _blocks(blocks: Sequence[AnyBlock], keep: Callable[[str], str]) -> list[str]:
    return [line for block in blocks for line in _block(block, keep)]


def _same(text: str) -> str:
    return text


def to_html(doc: Document, keep: Callable[[str], str] = _same) -> str:
    """The page; ``keep`` filters every text (the PDF drops characters no installed font can draw)."""
    lang = doc.lang
    labels = LABELS[lang]
    html_lang = "zh-CN" if lang == "zh" else "en"
    out = [
        "<!DOCTYPE html>",
        f'<html lang="{html_lang}">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(keep(doc.title))}</title>",
        f"<style>\n{_css(lang)}\n</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>{escape(keep(doc.title))}</h1>",
    ]
    if doc.subtitle:
        out.append(f'<p class="subtitle">{escape(keep(doc.subtitle))}</p>')
    out += ["</header>", "<main>"]
    for section in doc.sections:
        out.append("<section>")
        if section.heading:
            out.append(f"<h2>{escape(keep(section.heading))}</h2>")
        out += _blocks(section.blocks, keep)
        if section.notes:
            notes = escape(keep(section.notes))
            out.append(f'<aside class="notes" aria-label="{labels["notes"]}">{notes}</aside>')
        out.append("</section>")
    if doc.sources:
        out += ['<section class="sources">', f"<h2>{labels['sources']}</h2>", "<ol>"]
        for source in doc.sources:
            url = escape(source.url)
            title = escape(keep(source.title))
            out.append(f'<li><a href="{url}" rel="noreferrer">{title}</a><span class="url">{url}</span></li>')
        out += ["</ol>", "</section>"]
    out += ["</main>", "</body>", "</html>", ""]
    return "\n".join(out)
