"""Files → text for a model to read: plain text in any common encoding, PDF, Word, PowerPoint, Excel.

Text encodings are detected in this order: a byte-order mark, UTF-8, charset-normalizer's guess when it
is Japanese or traditional Chinese (Big5), GB18030 (covers GBK and GB2312, the usual encodings of
Chinese files on Windows) when it decodes cleanly into mostly Chinese text, then charset-normalizer's
best guess. Known limit: Korean EUC-KR text decodes as GBK and is read as such. A file that is none
of these (NUL bytes, or nothing decodes it) is refused, naming what can be read. Every reader stops
at ``max_chars`` and says so in ``note``.

Heavy libraries (pypdf, python-docx, python-pptx, openpyxl) are imported inside the reader that needs
them: this module is loaded only in workers.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tether.errors import TaskFailed

SNIFF_BYTES = 8192
MAX_SHEET_ROWS = 2_000  # rows read from one worksheet (openpyxl read-only mode streams them)
MAX_CELL_CHARS = 500
READABLE = "text files (UTF-8, GBK/GB18030, UTF-16 and other encodings), .pdf, .docx, .pptx, .xlsx/.xlsm"
_DOCUMENTS = {".pdf": "pdf", ".docx": "docx", ".pptx": "pptx", ".xlsx": "xlsx", ".xlsm": "xlsx"}
_OLD_OFFICE = {".doc": ".docx", ".ppt": ".pptx", ".xls": ".xlsx"}
_TRUSTED_GUESSES = frozenset({"big5", "cp950", "big5hkscs", "shift_jis", "cp932", "euc_jp", "iso2022_jp"})
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


class Unreadable(TaskFailed):
    """A file that cannot be turned into text; the message says what can be read."""

    code = "unreadable"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    text: str
    kind: str  # text, pdf, docx, pptx, xlsx
    encoding: str | None = None
    clipped: bool = False
    note: str = ""


def suffix_of(name: str) -> str:
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def read_document(name: str, data: bytes, *, complete: bool, max_chars: int) -> Reading:
    """``data`` (the first bytes of the file ``name``; ``complete`` when it is all of it) as text."""
    suffix = suffix_of(name)
    if suffix in _OLD_OFFICE:
        raise Unreadable(
            f"{name}: the old binary Office format ({suffix}) cannot be read; save it as "
            f"{_OLD_OFFICE[suffix]} first. Readable: {READABLE}",
            readable=READABLE,
        )
    kind = _DOCUMENTS.get(suffix)
    if kind is None:
        return read_text(name, data, complete=complete, max_chars=max_chars)
    if not complete:
        raise Unreadable(f"{name}: too large to open (see [workspace] max_read_bytes)", kind=kind)
    reader = {"pdf": _pdf, "docx": _docx, "pptx": _pptx, "xlsx": _xlsx}[kind]
    try:
        chunks = reader(data)
        text, clipped = _gather(chunks, max_chars)
    except Unreadable:
        raise
    except Exception as exc:  # a damaged or mislabelled document: say so, no traceback
        raise Unreadable(
            f"{name}: not a readable {kind} file ({type(exc).__name__}: {exc})", kind=kind
        ) from exc
    note = f"clipped at {max_chars} characters" if clipped else ""
    return Reading(text=text, kind=kind, clipped=clipped, note=note)


def read_text(name: str, data: bytes, *, complete: bool, max_chars: int) -> Reading:
    encoding = detect_encoding(data, complete=complete)
    if encoding is None:
        raise Unreadable(f"{name}: a binary file, not text. Readable: {READABLE}", readable=READABLE)
    text = data.decode(encoding, errors="replace" if not complete else "strict")
    clipped = not complete or len(text) > max_chars
    if len(text) > max_chars:
        text = text[:max_chars]
    note = ""
    if clipped:
        note = f"clipped: the first {len(text)} characters" + ("" if complete else " of a larger file")
    return Reading(text=text, kind="text", encoding=encoding.removesuffix("-sig"), clipped=clipped, note=note)


def detect_encoding(data: bytes, *, complete: bool = True) -> str | None:
    """The encoding of ``data``, or None for binary. A cut file may end inside a character."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    if b"\x00" in data[:SNIFF_BYTES]:
        return None
    sample = data if complete else _trim_partial(data)
    try:
        sample.decode("utf-8")
        return "utf-8"
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(sample[: 256 * 1024]).best()
    guess = None if best is None else str(best.encoding)
    if guess in _TRUSTED_GUESSES:
        return guess  # Japanese and traditional Chinese would also decode as GB18030, wrongly
    try:
        if _mostly_chinese(sample.decode("gb18030")):
            return "gb18030"  # short GBK text is often guessed as Korean; GBK is far likelier here
    except UnicodeDecodeError:
        pass
    return guess


def _trim_partial(data: bytes) -> bytes:
    """Drop up to 3 trailing bytes that may be half of a multi-byte character."""
    for cut in range(4):
        candidate = data[: len(data) - cut] if cut else data
        try:
            candidate.decode("utf-8")
            return candidate
        except UnicodeDecodeError:
            continue
    return data


def _mostly_chinese(text: str) -> bool:
    letters = [c for c in text if not c.isascii()]
    if not letters:
        return True
    han = sum(
        1
        for c in letters
        if "\u4e00" <= c <= "\u9fff" or "\u3000" <= c <= "\u303f" or "\uff00" <= c <= "\uffef"
    )
    return han / len(letters) >= 0.8


def _gather(chunks: Iterable[str], max_chars: int) -> tuple[str, bool]:
    parts: list[str] = []
    size = 0
    for chunk in chunks:
        if size + len(chunk) > max_chars:
            parts.append(chunk[: max_chars - size])
            return "".join(parts), True
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts), False


def _pdf(data: bytes) -> Iterable[str]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise Unreadable("the PDF is password-protected", kind="pdf")
    total = len(reader.pages)
    for number, page in enumerate(reader.pages, 1):
        yield f"--- page {number}/{total} ---\n{(page.extract_text() or '').strip()}\n"


def _docx(data: bytes) -> Iterable[str]:
    from docx import Document

    document = Document(io.BytesIO(data))
    for paragraph in document.paragraphs:
        if paragraph.text:
            yield paragraph.text + "\n"
    for number, table in enumerate(document.tables, 1):
        yield f"--- table {number} ---\n"
        for row in table.rows:
            yield "\t".join(cell.text for cell in row.cells) + "\n"


def _pptx(data: bytes) -> Iterable[str]:
    from pptx import Presentation

    deck = Presentation(io.BytesIO(data))
    for number, slide in enumerate(deck.slides, 1):
        yield f"--- slide {number} ---\n"
        for shape in slide.shapes:
            if getattr(shape, "has_text_frame", False) and shape.text_frame.text:  # type: ignore[attr-defined]
                yield shape.text_frame.text + "\n"  # type: ignore[attr-defined]
            if getattr(shape, "has_table", False):
                for row in shape.table.rows:  # type: ignore[attr-defined]
                    yield "\t".join(cell.text for cell in row.cells) + "\n"
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text
            if notes:
                yield f"(notes) {notes}\n"


def _xlsx(data: bytes) -> Iterable[str]:
    from openpyxl import load_workbook

    book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        for sheet in book.worksheets:
            yield f"--- sheet {sheet.title} ---\n"
            rows = 0
            for row in sheet.iter_rows(values_only=True):
                if rows >= MAX_SHEET_ROWS:
                    yield f"(only the first {MAX_SHEET_ROWS} rows of this sheet are read)\n"
                    break
                rows += 1
                cells = ["" if value is None else _cell(value) for value in row]
                while cells and not cells[-1]:
                    cells.pop()
                if cells:
                    yield "\t".join(cells) + "\n"
    finally:
        book.close()


def _cell(value: Any) -> str:
    text = str(value).replace("\t", " ").replace("\n", " ")
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"
