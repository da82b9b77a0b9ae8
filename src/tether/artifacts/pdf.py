"""PDF out: ``write_pdf(doc, path)`` prints ``to_html(doc)`` with WeasyPrint on A4, page numbers in the
footer, the Noto Sans CJK font embedded (subset) so the file reads the same on any machine."""

from __future__ import annotations

import logging
import os

from tether.artifacts.document import Document
from tether.artifacts.fonts import drawable, find_font
from tether.artifacts.html import to_html

# WeasyPrint and fontTools log every font subset at INFO/WARNING; a worker log is not the place.
QUIET_LOGGERS = ("weasyprint", "fontTools")


def write_pdf(doc: Document, path: str | os.PathLike[str]) -> int:
    """Write the PDF to ``path``; returns the number of pages. ``FontMissing`` without the CJK font
    (a PDF with empty boxes for every Chinese character would be worse than none)."""
    find_font("regular")
    find_font("bold")
    find_font("mono")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    from weasyprint import HTML

    # Characters no installed font has are dropped, not printed as boxes (emoji without an emoji font).
    rendered = HTML(string=to_html(doc, keep=drawable)).render()
    rendered.write_pdf(os.fspath(path))
    return len(rendered.pages)
