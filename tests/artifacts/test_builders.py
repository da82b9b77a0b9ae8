"""Markdown, HTML and PDF out, in Chinese and English; ``build`` writes atomically and only what is asked."""

from __future__ import annotations

import importlib
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.artifacts.samples import EN, ZH
from tether.artifacts import FORMATS, DocumentError, build, from_markdown, make_document
from tether.artifacts.html import to_html
from tether.artifacts.markdown import to_markdown
from tether.artifacts.pdf import write_pdf

SAMPLES = {"zh": ZH, "en": EN}


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_markdown_lists_sources_with_their_urls(lang: str) -> None:
    doc = from_markdown(SAMPLES[lang])
    text = to_markdown(doc)
    heading = "## 来源" if lang == "zh" else "## Sources"
    assert heading in text
    for i, source in enumerate(doc.sources, 1):
        assert f"{i}. [" in text and f"](<{source.url}>)" in text
    assert from_markdown(text) == doc


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.hrefs += [value or "" for name, value in attrs if name in ("href", "src")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_html_is_one_self_contained_page_with_every_text(lang: str) -> None:
    doc = from_markdown(SAMPLES[lang])
    page = to_html(doc)
    parsed = _Collect()
    parsed.feed(page)
    assert "script" not in parsed.tags and "link" not in parsed.tags and "img" not in parsed.tags
    assert all(href.startswith("https://") for href in parsed.hrefs)  # only the sources' links
    assert f'lang="{"zh-CN" if lang == "zh" else "en"}"' in page
    assert "Noto Sans CJK SC" in page and "size: A4" in page
    body = _squash("".join(parsed.text))
    for section in doc.sections:
        for item in (section.heading, *section.paragraphs, *section.bullets):
            assert _squash(item) in body


def test_html_escapes_everything_a_person_or_model_wrote() -> None:
    doc = make_document(
        title="<script>alert(1)</script>",
        sections=[{"heading": "\"'><img src=x onerror=alert(1)>", "bullets": ["a & b < c"]}],
        sources=[{"title": "</a><script>", "url": "https://x.example/?q=1&r='x'"}],
    )  # fmt: skip
    page = to_html(doc)
    parsed = _Collect()
    parsed.feed(page)
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "a &amp; b &lt; c" in page
    assert 'href="https://x.example/?q=1&amp;r=&#x27;x&#x27;"' in page


def _fonts(pdf: Path) -> list[tuple[str, bool]]:
    """(base font name, embedded?) for every font in the PDF."""
    from pypdf import PdfReader

    found = []
    for page in PdfReader(pdf).pages:
        resources: Any = page["/Resources"].get_object()
        fonts = resources.get("/Font", {})
        for ref in fonts.values():
            font = ref.get_object()
            owner = font["/DescendantFonts"][0].get_object() if "/DescendantFonts" in font else font
            descriptor = owner.get("/FontDescriptor")
            descriptor = descriptor.get_object() if descriptor is not None else {}
            embedded = any(key in descriptor for key in ("/FontFile", "/FontFile2", "/FontFile3"))
            found.append((str(font["/BaseFont"]), embedded))
    return found


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_pdf_holds_the_text_and_embeds_the_cjk_font(lang: str, tmp_path: Path) -> None:
    from pypdf import PdfReader

    doc = from_markdown(SAMPLES[lang])
    path = tmp_path / "doc.pdf"
    pages = write_pdf(doc, path)
    reader = PdfReader(path)
    assert pages == len(reader.pages) >= 2
    assert reader.pages[0].mediabox.width == pytest.approx(595.3, abs=1)  # A4
    text = _squash("".join(page.extract_text() for page in reader.pages))
    for item in (doc.title, doc.sections[1].bullets[0], doc.sections[2].paragraphs[0][:40]):
        assert _squash(item) in text
    if lang == "zh":
        assert "社区参与" in text
    assert "1/2" in text.replace("Page1of2", "1/2").replace("第1页/共2页", "1/2") or pages > 2
    fonts = _fonts(path)
    assert fonts and all(embedded for _, embedded in fonts)
    assert any("Noto" in name and "CJK" in name for name, _ in fonts)


def test_build_writes_only_the_formats_asked_for(tmp_path: Path) -> None:
    doc = from_markdown(ZH)
    built = build(doc, ["pptx", "md"], tmp_path, "城市更新")
    assert [(item.format, item.path.name) for item in built] == [
        ("pptx", "城市更新.pptx"),
        ("md", "城市更新.md"),
    ]
    assert built[0].slides and built[0].slides >= 6 and built[1].slides is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["城市更新.md", "城市更新.pptx"]
    assert all(item.size == item.path.stat().st_size > 0 for item in built)
    assert all(os.stat(item.path).st_mode & 0o777 == 0o600 for item in built)


@pytest.mark.parametrize(
    ("formats", "expected"),
    [(["docx"], "unknown format(s) 'docx'; the formats are md, html, pptx, pdf"),
     ([], "no format asked for; choose from md, html, pptx, pdf"),
     (["md", "md"], "listed twice")],
)  # fmt: skip
def test_build_refuses_formats_it_does_not_offer(formats: list[str], expected: str, tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as caught:
        build(make_document(title="T"), formats, tmp_path, "t")
    assert expected in caught.value.message
    assert list(tmp_path.iterdir()) == []
    assert FORMATS == ("md", "html", "pptx", "pdf")


@pytest.mark.parametrize("stem", ["../x", "a/b", ".hidden", "", "x" * 81])
def test_build_refuses_stems_that_are_not_plain_names(stem: str, tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="not a file name stem"):
        build(make_document(title="T"), ["md"], tmp_path, stem)


def test_a_build_stopped_midway_leaves_whole_files_only(tmp_path: Path) -> None:
    """A stop between formats (``before_each`` raises, as ``ctx.check_stop`` does) leaves the files
    already written complete and nothing half-written under a final name or a temporary one."""
    doc = from_markdown(EN)
    (tmp_path / "report.pdf").write_bytes(b"the previous version")

    def stop_at_pdf(fmt: str, index: int) -> None:
        if fmt == "pdf":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build(doc, ["md", "pdf"], tmp_path, "report", before_each=stop_at_pdf)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "report.pdf"]
    assert (tmp_path / "report.pdf").read_bytes() == b"the previous version"


def test_a_builder_that_fails_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_module = importlib.import_module("tether.artifacts.build")  # the package re-exports build()

    def broken(doc: object, path: Path) -> None:
        path.write_bytes(b"half a fi")
        raise OSError("disk full")

    monkeypatch.setattr(build_module, "_writer", lambda fmt: broken)
    with pytest.raises(OSError, match="disk full"):
        build(make_document(title="T"), ["pdf"], tmp_path, "t")
    assert list(tmp_path.iterdir()) == []
