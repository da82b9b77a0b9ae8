"""Readers: every common encoding and office format becomes text; binaries are refused, saying what is
readable; long text is clipped with a note."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.toolkits.workspace.readers import READABLE, Unreadable, detect_encoding, read_document

CHINESE = "季度报告：收入增长百分之十二，用户满意度提高。下一步计划扩大市场。"


def read(name: str, data: bytes, max_chars: int = 10_000, complete: bool = True) -> tuple[str, str | None]:
    reading = read_document(name, data, complete=complete, max_chars=max_chars)
    return reading.text, reading.encoding


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [
        ("utf-8", "utf-8"),
        ("utf-8-sig", "utf-8"),
        ("utf-16", "utf-16"),
        ("gb18030", "gb18030"),
        ("gbk", "gb18030"),
    ],
)
def test_chinese_text_in_common_encodings_reads_back(encoding: str, expected: str) -> None:
    text, detected = read("notes.txt", (CHINESE + "\nEnglish line\n").encode(encoding))
    assert CHINESE in text and "English line" in text
    assert detected == expected


@pytest.mark.parametrize(
    ("sample", "encoding"),
    [
        ("これは日本語のテキストです。よろしくお願いします。", "shift_jis"),
        ("這是繁體中文的測試文字，謝謝。", "big5"),
        ("季度报告", "gbk"),  # too short for a statistical guess: GBK is the likely one
    ],
)
def test_other_east_asian_encodings_are_told_apart(sample: str, encoding: str) -> None:
    text, _ = read("other.txt", sample.encode(encoding))
    assert text == sample


def test_single_byte_encodings_are_read_not_refused() -> None:
    text, detected = read("fr.txt", ("Café crème, déjà vu. " * 20).encode("cp1252"))
    assert text.startswith("Caf") and detected is not None


def test_binary_files_are_refused_naming_what_is_readable() -> None:
    with pytest.raises(Unreadable) as caught:
        read("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    assert READABLE in caught.value.message
    with pytest.raises(Unreadable, match=r"save it as \.docx"):
        read("old.doc", b"\xd0\xcf\x11\xe0")
    with pytest.raises(Unreadable, match="not a readable docx"):
        read("broken.docx", b"PK\x03\x04 not really a zip")


def test_long_text_is_clipped_with_a_note() -> None:
    reading = read_document("long.md", ("行" * 5000).encode(), complete=True, max_chars=1000)
    assert len(reading.text) == 1000 and reading.clipped and "clipped" in reading.note
    partial = read_document("big.log", ("中文" * 100).encode()[:-1], complete=False, max_chars=10_000)
    assert partial.clipped and "larger file" in partial.note and "中文" in partial.text


def test_docx_paragraphs_and_tables() -> None:
    from docx import Document

    document = Document()
    document.add_paragraph(CHINESE)
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "名称"
    table.rows[0].cells[1].text = "数量"
    buffer = io.BytesIO()
    document.save(buffer)
    text, _ = read("报告.docx", buffer.getvalue())
    assert CHINESE in text and "名称\t数量" in text


def test_pptx_slides_tables_and_notes() -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "第一页"  # type: ignore[union-attr]
    slide.placeholders[1].text = CHINESE  # type: ignore[attr-defined]
    slide.shapes.add_table(1, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table.cell(0, 0).text = "单元格"
    slide.notes_slide.notes_text_frame.text = "演讲备注"  # type: ignore[union-attr]
    buffer = io.BytesIO()
    deck.save(buffer)
    text, _ = read("deck.pptx", buffer.getvalue())
    assert "--- slide 1 ---" in text and "第一页" in text and CHINESE in text
    assert "单元格" in text and "(notes) 演讲备注" in text


def test_xlsx_rows_are_bounded_and_read_only() -> None:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "销售"
    sheet.append(["城市", "数量"])
    for number in range(2500):
        sheet.append([f"城市{number}", number])
    buffer = io.BytesIO()
    book.save(buffer)
    text, _ = read("data.xlsx", buffer.getvalue(), max_chars=1_000_000)
    assert "--- sheet 销售 ---" in text and "城市\t数量" in text and "城市10\t10" in text
    assert "only the first 2000 rows" in text and "城市2400" not in text


def test_pdf_text_with_chinese() -> None:
    from weasyprint import HTML

    pdf = HTML(string=f"<html><body><p>{CHINESE}</p><p>Page one in English</p></body></html>").write_pdf()
    assert pdf is not None
    text, _ = read("report.pdf", pdf)
    assert "--- page 1/1 ---" in text and "Page one in English" in text
    assert "季度报告" in text.replace(" ", "")


def test_a_cut_document_is_refused_not_misread() -> None:
    with pytest.raises(Unreadable, match="too large"):
        read("huge.pdf", b"%PDF-1.7", complete=False)


@given(st.binary(max_size=2000), st.booleans())
def test_any_bytes_become_text_or_a_clear_refusal(data: bytes, complete: bool) -> None:
    try:
        reading = read_document("file.txt", data, complete=complete, max_chars=500)
    except Unreadable as exc:
        assert "Readable:" in exc.message
        return
    assert len(reading.text) <= 500
    assert detect_encoding(data, complete=complete) is not None
