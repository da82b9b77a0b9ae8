"""HTML out: ``to_html(doc)``, one self-contained, printable page.

No scripts, no external requests: the CSS is inline, fonts come from the reader's system (Noto Sans
CJK first, then the usual Chinese system fonts), every piece of text and every URL is escaped, and
links are only the ``http``/``https`` URLs the document model let through. The same page is what
``pdf.write_pdf`` prints (A4, page numbers in the footer).
"""

from __future__ import annotations

from html import escape

from tether.artifacts.document import Document

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
.url { color: #6b7280; display: block; font-size: 0.85rem; overflow-wrap: anywhere; }
@media print { body { max-width: none; padding: 0; } a { color: inherit; } }
"""


def _css(lang: str) -> str:
    page = LABELS[lang]["page"].replace("{page}", '" counter(page) "')
    page = page.replace("{pages}", '" counter(pages) "')
    return CSS.replace("FONTS", FONT_STACK).replace("PAGE_LABEL", f'"{page}"').strip()


def to_html(doc: Document) -> str:
    lang = doc.lang
    labels = LABELS[lang]
    html_lang = "zh-CN" if lang == "zh" else "en"
    out = [
        "<!DOCTYPE html>",
        f'<html lang="{html_lang}">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(doc.title)}</title>",
        f"<style>\n{_css(lang)}\n</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>{escape(doc.title)}</h1>",
    ]
    if doc.subtitle:
        out.append(f'<p class="subtitle">{escape(doc.subtitle)}</p>')
    out += ["</header>", "<main>"]
    for section in doc.sections:
        out.append("<section>")
        if section.heading:
            out.append(f"<h2>{escape(section.heading)}</h2>")
        out += [f"<p>{escape(paragraph)}</p>" for paragraph in section.paragraphs]
        if section.bullets:
            out += ["<ul>", *(f"<li>{escape(bullet)}</li>" for bullet in section.bullets), "</ul>"]
        if section.notes:
            out.append(f'<aside class="notes" aria-label="{labels["notes"]}">{escape(section.notes)}</aside>')
        out.append("</section>")
    if doc.sources:
        out += ['<section class="sources">', f"<h2>{labels['sources']}</h2>", "<ol>"]
        for source in doc.sources:
            url = escape(source.url)
            title = escape(source.title)
            out.append(f'<li><a href="{url}" rel="noreferrer">{title}</a><span class="url">{url}</span></li>')
        out += ["</ol>", "</section>"]
    out += ["</main>", "</body>", "</html>", ""]
    return "\n".join(out)
