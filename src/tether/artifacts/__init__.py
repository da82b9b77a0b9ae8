"""Documents: one model, four builders (Markdown, HTML, PPTX, PDF), all at home in Chinese and English.

Owns the document model (``Document``, ``Section`` and its blocks: paragraphs with emphasis, lists,
code, tables, images, quotes), ``reader.from_markdown`` that reads CommonMark + GFM tables into it,
the builders (``markdown.to_markdown``, ``html.to_html``, ``pdf.write_pdf``, ``pptxdraw.write_pptx``
drawing what ``pptx.plan_deck`` and ``slideparts`` planned), the fonts and the measured line breaking
that keep slide text inside its boxes (``fonts``, ``textfit``), and ``build``, which writes the
formats asked for atomically.

It may import ``tether.errors``, ``tether.tasks`` types and libraries (pydantic, markdown-it-py,
python-pptx, WeasyPrint, Pillow) — never execution, agents or interfaces: a toolkit handler running in
a worker is its caller. Importing this package is light; python-pptx and WeasyPrint load only when a
deck or a PDF is built.
"""

from tether.artifacts.build import FORMATS, Built, Format, build, check_formats
from tether.artifacts.document import (
    Document,
    DocumentError,
    Section,
    Source,
    detect_language,
    make_document,
)
from tether.artifacts.reader import from_markdown

__all__ = [
    "FORMATS",
    "Built",
    "Document",
    "DocumentError",
    "Format",
    "Section",
    "Source",
    "build",
    "check_formats",
    "detect_language",
    "from_markdown",
    "make_document",
]
