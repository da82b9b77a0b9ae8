"""Documents (``tether.artifacts``) next to the same libraries used plainly, measured interleaved:

- a 30-slide deck, in Chinese and in English, as PPTX: ours measures every line with the font's metrics,
  picks layouts and sizes and splits dense sections; the floor is python-pptx writing the same 30
  slides as plain text boxes, nothing measured;
- the same document as PDF: ours is the styled page WeasyPrint prints with the CJK font embedded; the
  floor is WeasyPrint rendering a minimal HTML page of the same text;
- what is kept of a structured Markdown (``tests/artifacts/structured.py``: tables, code, nested and
  numbered lists, emphasis, a picture) in the page and the deck, counted (issue 23: all of it was lost).
"""

from __future__ import annotations

import html
import logging
import tempfile
from pathlib import Path
from typing import Any

from bench.paired import paired, row
from tether.artifacts import Document, from_markdown
from tether.artifacts.pdf import write_pdf
from tether.artifacts.pptxdraw import write_pptx

SECTIONS = 29  # and the title slide: 30 slides
PPTX_ROUNDS = 10
PDF_ROUNDS = 6


def deck_markdown(zh: bool) -> str:
    """A section per slide, in three densities: many short bullets, a long paragraph with two bullets,
    five longer mixed bullets."""
    parts = ["# 三十页演示" if zh else "# A thirty-slide deck", ""]
    for i in range(SECTIONS):
        parts.append(f"## 第 {i + 1} 节" if zh else f"## Section {i + 1}")
        if i % 3 == 0:
            parts += [f"- 要点 {j}：简短" if zh else f"- Point {j}: short" for j in range(8)]
        elif i % 3 == 1:
            long_zh = "这一节用一段较长的文字说明背景、方法与结论，" * 4
            long_en = "This section explains the background, the method and the conclusion at length. " * 3
            parts.append(long_zh if zh else long_en)
            parts += ["- 第一点" if zh else "- First point", "- 第二点" if zh else "- Second point"]
        else:
            parts += [f"- 第 {j} 条较长的说明文字，混合 English words 与中文" if zh else
                      f"- Item {j} is a longer explanation that wraps onto a second line of the slide"
                      for j in range(5)]  # fmt: skip
        parts.append("")
    return "\n".join(parts)


def _plain_pptx(doc: Document, path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Emu, Pt

    deck = Presentation()
    deck.slide_width, deck.slide_height = Emu(12192000), Emu(6858000)
    blank = deck.slide_layouts[6]
    pages = [(doc.title, doc.subtitle)] + [
        (s.heading, "\n".join([*s.paragraphs, *s.bullets])) for s in doc.sections
    ]
    for heading, body in pages:
        slide = deck.slides.add_slide(blank)
        title = slide.shapes.add_textbox(Emu(548640), Emu(304800), Emu(11094720), Emu(1041400))
        title.text_frame.text = heading
        title.text_frame.paragraphs[0].runs[0].font.size = Pt(32)
        box = slide.shapes.add_textbox(Emu(548640), Emu(1498600), Emu(11094720), Emu(4978400))
        box.text_frame.word_wrap = True
        box.text_frame.text = body
    deck.save(str(path))


def _plain_pdf(doc: Document, path: Path) -> None:
    from weasyprint import HTML

    body = [f"<h1>{html.escape(doc.title)}</h1>"]
    for section in doc.sections:
        body.append(f"<h2>{html.escape(section.heading)}</h2>")
        body += [f"<p>{html.escape(text)}</p>" for text in section.paragraphs]
        body += ["<ul>", *(f"<li>{html.escape(text)}</li>" for text in section.bullets), "</ul>"]
    page = f"<html><body style=\"font-family: 'Noto Sans CJK SC'\">{''.join(body)}</body></html>"
    HTML(string=page).write_pdf(str(path))


def artifacts(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    logging.getLogger("fontTools").setLevel(logging.ERROR)
    folder = Path(tempfile.mkdtemp(dir=home))
    print("\ndocuments: a 30-slide deck, ours (measured, laid out) next to the library used plainly")
    for lang in ("zh", "en"):
        doc = from_markdown(deck_markdown(lang == "zh"))
        slides = write_pptx(doc, folder / "probe.pptx")
        row(f"PPTX, {slides} slides ({lang})",
            paired(lambda d=doc: write_pptx(d, folder / "ours.pptx"),
                   lambda d=doc: _plain_pptx(d, folder / "plain.pptx"), PPTX_ROUNDS),
            "python-pptx, plain text boxes")  # fmt: skip
    for lang in ("zh", "en"):
        doc = from_markdown(deck_markdown(lang == "zh"))
        pages = write_pdf(doc, folder / "probe.pdf")
        row(f"PDF, {pages} A4 pages ({lang})",
            paired(lambda d=doc: write_pdf(d, folder / "ours.pdf"),
                   lambda d=doc: _plain_pdf(d, folder / "plain.pdf"), PDF_ROUNDS),
            "WeasyPrint, minimal HTML")  # fmt: skip


def structure_kept(folder: Path) -> None:
    """Counts of the structures the built page and deck hold, read back from the files."""
    import re

    from pptx import Presentation
    from tests.artifacts.structured import MARKDOWN, picture

    from tether.artifacts import build

    picture(folder / "pipeline.png")
    doc = from_markdown(
        MARKDOWN, resolve_image=lambda src: str(folder / src) if (folder / src).is_file() else None
    )
    built = {item.format: item.path for item in build(doc, ["html", "pptx"], folder, "structure")}
    page = built["html"].read_text(encoding="utf-8")
    shapes: list[Any] = [shape for slide in Presentation(str(built["pptx"])).slides for shape in slide.shapes]
    runs = [run for s in shapes if s.has_text_frame for p in s.text_frame.paragraphs for run in p.runs]
    counts = {
        "HTML tables (of 2)": page.count("<table>"),
        "HTML code blocks (of 1)": page.count("<pre>"),
        "HTML lists nested in an item (of 2)": len(re.findall(r"<li>[^<]*\n?<ul>", page)),
        "HTML pictures (of 1)": page.count("<img "),
        "deck table shapes (2 tables, the long one split)": sum(s.has_table for s in shapes),
        "deck pictures (of 1)": sum(s.shape_type == 13 for s in shapes),
        "deck monospace runs (4 code lines, `deploy.sh`)": sum("Mono" in (r.font.name or "") for r in runs),
        "deck numbered items (of 3)": sum(s._element.xml.count("buAutoNum") for s in shapes),
    }
    print("\ndocuments: structure kept from a Markdown with tables, code, lists, emphasis, a picture")
    for name, count in counts.items():
        print(f"  {name:50} {count}")


if __name__ == "__main__":
    structure_kept(Path(tempfile.mkdtemp(prefix="tether-bench-")))
    artifacts(Path(tempfile.mkdtemp(prefix="tether-bench-")) / "artifacts")
