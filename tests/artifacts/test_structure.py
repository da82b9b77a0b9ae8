"""Every format keeps the structure of the Markdown it is given: read the built files back (the HTML's
elements, the PDF's words with their positions, the deck's shapes and runs) and compare them with the
structure asked for — tables as tables, code in a monospace face with its indentation, list levels and
numbers, emphasis, pictures, the order of the blocks — as pandoc would keep them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import html as lxml_html

from tests.artifacts.structured import LONG_ROWS, MARKDOWN, picture
from tether.artifacts import Document, build, from_markdown
from tether.artifacts.document import Code, ListBlock, Paragraph, Table
from tether.artifacts.fonts import MONO_FAMILY, drawable
from tether.artifacts.markdown import to_markdown

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


@pytest.fixture
def doc(tmp_path: Path) -> Document:
    picture(tmp_path / "pipeline.png")

    def resolve(src: str) -> str | None:
        path = tmp_path / src
        return str(path) if path.is_file() else None

    return from_markdown(MARKDOWN, resolve_image=resolve)


def test_the_model_keeps_every_block_in_order(doc: Document) -> None:
    steps = doc.sections[0]
    kinds = [block.kind for block in steps.blocks]
    assert kinds == ["paragraph", "list", "paragraph", "code", "table", "image", "quote", "list"]
    first = steps.blocks[0]
    assert isinstance(first, Paragraph)
    assert [(s.text, s.bold, s.italic, s.code) for s in first.spans if s.bold or s.italic or s.code] == [
        ("three phases", True, False, False), ("risky", False, True, False), ("deploy.sh", False, False, True)
    ]  # fmt: skip
    numbered = steps.blocks[1]
    assert isinstance(numbered, ListBlock) and numbered.ordered and numbered.start == 3
    nested = numbered.items[1].blocks[1]
    assert isinstance(nested, ListBlock) and isinstance(nested.items[0].blocks[1], ListBlock)
    code = steps.blocks[3]
    assert isinstance(code, Code) and code.language == "python"
    assert code.text.splitlines()[2] == '        raise ValueError("no version")'
    table = doc.sections[1].blocks[0]
    assert isinstance(table, Table) and len(table.rows) == LONG_ROWS and len(table.header) == 3
    assert doc.title == "Release plan 🚀" and doc.sources[0].url == "https://runbook.example/r"


def test_markdown_out_reads_back_to_the_same_document(doc: Document) -> None:
    text = to_markdown(doc)
    assert "| :-- | :-: | --: |" in text and "    if not version:" in text and "3. Build the wheel" in text
    assert from_markdown(text, resolve_image=lambda src: next(
        (b.path for b in doc.sections[0].blocks if b.kind == "image"), None)) == doc  # fmt: skip


def test_html_has_real_tables_code_lists_emphasis_and_pictures(doc: Document, tmp_path: Path) -> None:
    (built,) = build(doc, ["html"], tmp_path, "plan")
    page = lxml_html.fromstring(built.path.read_bytes())
    tables = page.findall(".//table")
    assert len(tables) == 2
    assert [th.text_content() for th in tables[0].findall(".//th")] == ["Phase", "Owner", "Days"]
    assert len(tables[0].findall(".//tbody/tr")) == 3 and len(tables[1].findall(".//tbody/tr")) == LONG_ROWS
    assert tables[0].findall(".//th")[2].get("style") == "text-align:right"
    code = page.find(".//pre/code")
    assert code is not None and "\n        raise ValueError" in code.text_content()
    ordered = page.find(".//ol")
    assert ordered is not None and ordered.get("start") == "3"
    assert ordered.find("./li/ul/li/ul/li") is not None  # three levels
    assert page.find(".//strong").text_content() == "three phases"
    assert page.find(".//em").text_content() == "risky"
    image = page.find(".//img")
    assert image is not None and image.get("src", "").startswith("data:image/png;base64,")
    order = [
        el.text_content().strip()[:12] for el in page.iter("p", "ol", "pre", "table", "figure", "blockquote")
    ]
    assert order.index("Build the wh") < order.index("After the li") < order.index("def publish(")


Word = tuple[int, float, float, str, float, float]  # page, top, left, text, width, bottom


def _words(pdf: Path) -> list[Word]:
    out = subprocess.run(
        ["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    words, page = [], 0
    pattern = r'<page |<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">(.*?)</word>'
    for match in re.finditer(pattern, out):
        if match.group(1) is None:
            page += 1
        else:
            left = float(match.group(1))
            width, bottom = float(match.group(3)) - left, float(match.group(4))
            words.append((page, float(match.group(2)), left, match.group(5), width, bottom))
    return words


def _first(words: list[Word], text: str) -> Word:
    return next(word for word in words if word[3] == text)


def _pdf_tools() -> None:
    if not all(shutil.which(tool) for tool in ("pdftotext", "pdffonts")):
        pytest.skip("poppler-utils not installed")


def _check_printed(pdf: Path, *, numbers: bool) -> None:
    """The words of a printed document: code indented, order kept, table cells in rows, mono font."""
    words = _words(pdf)
    fn, ret = _first(words, "def"), _first(words, "return")
    assert ret[2] > fn[2] + 10 and ret[1] > fn[1]  # indented, below
    raise_ = _first(words, "raise")
    assert raise_[2] > ret[2] + 10  # two levels in
    before, after, item = _first(words, "Publish"), _first(words, "After"), _first(words, "Build")
    assert (after[0], after[1]) > (before[0], before[1]) > (item[0], item[1])
    phase, owner, days = _first(words, "Phase"), _first(words, "Owner"), _first(words, "Days")
    assert abs(phase[1] - owner[1]) < 2 and abs(owner[1] - days[1]) < 2 and phase[2] < owner[2] < days[2]
    if numbers:
        texts = [w[3] for w in words]
        assert texts[texts.index("Build") - 1] == "3." and texts[texts.index("Publish") - 1] == "5."
    # Monospace: in the code, "if" is two cells and "not" three, however narrow an "i" is elsewhere.
    cell_if, cell_not = _first(words, "if")[4] / 2, _first(words, "not")[4] / 3
    assert abs(cell_if - cell_not) < 0.08 * cell_not, (cell_if, cell_not)


def test_pdf_prints_the_structure(doc: Document, tmp_path: Path) -> None:
    _pdf_tools()
    (built,) = build(doc, ["pdf"], tmp_path, "plan")
    _check_printed(built.path, numbers=True)
    text = subprocess.run(["pdftotext", str(built.path), "-"], capture_output=True, text=True).stdout
    assert "🚀" not in text or drawable("🚀") == "🚀"  # no font for it: dropped, not a box


def _deck(path: Path) -> Any:
    from pptx import Presentation

    return Presentation(str(path))


def test_the_deck_draws_tables_code_lists_runs_and_pictures(doc: Document, tmp_path: Path) -> None:
    (built,) = build(doc, ["pptx"], tmp_path, "plan")
    deck = _deck(built.path)
    tables = [(index, shape.table) for index, slide in enumerate(deck.slides) for shape in slide.shapes
              if shape.has_table]  # fmt: skip
    first = tables[0][1]
    assert (len(first.rows), len(first.columns)) == (4, 3)
    assert [first.cell(0, c).text for c in range(3)] == ["Phase", "Owner", "Days"]
    long = [table for _, table in tables[1:]]
    assert len(long) >= 2, "a 40-row table is split over slides"
    assert sum(len(table.rows) - 1 for table in long) == LONG_ROWS
    assert all(table.cell(0, 1).text == "城市" for table in long)  # the header on every part
    sizes = [len(table.rows) for table in long]
    assert max(sizes) - min(sizes) <= 2  # shared evenly, no stub
    paragraphs = [p for slide in deck.slides for shape in slide.shapes if shape.has_text_frame
                  for p in shape.text_frame.paragraphs]  # fmt: skip
    code = [p for p in paragraphs if p.runs and p.runs[0].font.name == MONO_FAMILY and "raise" in p.text]
    assert code and code[0].text.startswith("        raise ValueError")
    numbered = [p for p in paragraphs if p.text in ("Build the wheel", "Test it", "Publish")]
    starts = [p._p.pPr.find(f"{A}buAutoNum").get("startAt") for p in numbered]
    assert starts == ["3", "4", "5"]
    levels = {p.text: int(p._p.pPr.get("lvl", "0")) for p in paragraphs if p.text in (
        "Test it", "unit tests", "fast ones first")}  # fmt: skip
    assert levels == {"Test it": 0, "unit tests": 1, "fast ones first": 2}
    runs = [run for p in paragraphs for run in p.runs]
    assert any(run.text == "three phases" and run.font.bold for run in runs)
    assert any(run.text == "risky" and run.font.italic for run in runs)
    assert any(run.text == "deploy.sh" and run.font.name == MONO_FAMILY for run in runs)
    pictures = [shape for slide in deck.slides for shape in slide.shapes if shape.shape_type == 13]
    assert len(pictures) == 1
    texts = [p.text for p in paragraphs]
    assert texts.index("After the list comes this sentence, and it stays after it.") > texts.index("Publish")
    every = "".join(run.text for run in runs)
    assert drawable(every) == every  # nothing a font cannot draw (an emoji without a font is dropped)
    assert deck.slides[0].shapes[0].text_frame.text.startswith("Release plan")


def test_libreoffice_draws_the_deck_with_its_structure(doc: Document, tmp_path: Path) -> None:
    if shutil.which("soffice") is None:
        import os

        if os.environ.get("TETHER_TEST_REQUIRE_LIBREOFFICE") == "1":
            pytest.fail("soffice is not installed")
        pytest.skip("soffice not installed")
    _pdf_tools()
    (built,) = build(doc, ["pptx"], tmp_path, "plan")
    profile = tmp_path / "lo-profile"
    subprocess.run(
        ["soffice", f"-env:UserInstallation={profile.as_uri()}", "--headless", "--convert-to", "pdf",
         "--outdir", str(tmp_path), str(built.path)],
        capture_output=True, timeout=90, check=True,
    )  # fmt: skip
    _check_printed(tmp_path / "plan.pdf", numbers=True)
    # Every word LibreOffice drew lies inside the shape it belongs to: text boxes, and table shapes at
    # the height planned (a row that grew taller than measured would push words below its table).
    areas: dict[int, list[tuple[float, float, float, float]]] = {}
    for number, slide in enumerate(_deck(built.path).slides, 1):
        for shape in slide.shapes:
            rect = tuple(int(v) / 12700 for v in (shape.left, shape.top, shape.width, shape.height))
            areas.setdefault(number, []).append(rect)  # type: ignore[arg-type]

    def inside(word: Word, x: float, y: float, w: float, h: float) -> bool:
        return (
            x - 1 <= word[2] and word[2] + word[4] <= x + w + 1 and y - 1 <= word[1] and word[5] <= y + h + 1
        )

    words = _words(tmp_path / "plan.pdf")
    outside = [word for word in words if not any(inside(word, *rect) for rect in areas[word[0]])]
    assert outside == []


def test_a_section_just_over_one_slide_is_shared_evenly() -> None:
    from tether.artifacts.pptx import plan_deck

    items = "\n".join(
        f"{i}. Step number {i} of the procedure, described in a full sentence." for i in range(1, 30)
    )
    doc = from_markdown(f"# T\n\n## Procedure\n\n{items}\n\nThe end.\n")
    bodies = [frame for plan in plan_deck(doc)[1:] for frame in plan.frames if frame.name == "body"]
    assert len(bodies) >= 2
    counts = [len(frame.pieces) for frame in bodies]
    assert min(counts) * 2 >= max(counts), counts  # never a last slide of a line or two


FRAGMENTS = (
    "## Heading {n}",
    "### Sub {n}",
    "Plain *em {n}* and **strong** with `code` and [a link](https://x.example/{n}).",
    "1. first {n}\n2. second\n   - nested\n     1. deep",
    "- [ ] task {n}\n- [x] done",
    "* star list {n}",
    "```js\nfunction f{n}() {{\n    return {n};\n}}\n```",
    "| h{n} | 值 |\n|---:|:--|\n| 1 | 二 |\n| | |",
    "> quoted {n}\n> > deeper\n> - in a quote",
    "![alt {n}](pic{n}.png)",
    "中文段落{n}，包含**加粗**和*斜体*。😀",
    "<div>raw <b>html</b> {n}</div>",
    "---",
    "    indented code {n}\n        more",
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(range(len(FRAGMENTS))), min_size=1, max_size=12), st.booleans())
def test_any_mix_of_blocks_reads_back_and_lays_out(picks: list[int], titled: bool) -> None:
    """Markdown made of any mix of structures: it reads back to itself from its Markdown, and the page and
    the deck are made with the blocks in order, whatever the mix."""
    from tether.artifacts.html import to_html
    from tether.artifacts.pptx import plan_deck

    body = "\n\n".join(FRAGMENTS[pick].format(n=index) for index, pick in enumerate(picks))
    doc = from_markdown(("# Mixed\n\n" if titled else "") + body, title=None if titled else "Mixed")
    assert from_markdown(to_markdown(doc), title=None if titled else "Mixed") == doc
    page = to_html(doc)
    assert page.count("<table>") == sum(FRAGMENTS[p].startswith("| h") for p in picks)
    slides = plan_deck(doc)
    tables = sum(len(plan.tables) for plan in slides)
    assert tables == sum(FRAGMENTS[p].startswith("| h") for p in picks)
