"""``build(doc, formats, folder, stem)``: write a document in the formats asked for, atomically.

Each file is written under a hidden temporary name in the target folder and renamed into place only
once it is complete, so a stop, a crash or a full disk never leaves a half-written file under the
final name (and a file of the same name is replaced whole or not at all).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.artifacts.document import Document, DocumentError

Format = Literal["md", "html", "pptx", "pdf"]
FORMATS: tuple[Format, ...] = ("md", "html", "pptx", "pdf")
FILE_MODE = 0o600
MAX_STEM_CHARS = 80
_STEM_RE = re.compile(r"^[^\s/\\.][^/\\]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Built:
    """One file written: ``pages`` for a PDF, ``slides`` for a deck, None for the others."""

    format: Format
    path: Path
    size: int
    pages: int | None = None
    slides: int | None = None


def check_formats(formats: Iterable[str]) -> tuple[Format, ...]:
    """The formats in the order given, refused unless each is one of ``FORMATS``, once."""
    chosen = list(formats)
    if not chosen:
        raise DocumentError(f"no format asked for; choose from {', '.join(FORMATS)}")
    unknown = [name for name in chosen if name not in FORMATS]
    if unknown:
        raise DocumentError(
            f"unknown format(s) {', '.join(map(repr, unknown))}; the formats are {', '.join(FORMATS)}"
        )
    if len(set(chosen)) != len(chosen):
        raise DocumentError(f"a format is listed twice in {chosen}; list each once")
    return tuple(chosen)  # type: ignore[return-value]


def _write_text(render: Callable[[Document], str]) -> Callable[[Document, Path], int | None]:
    def write(doc: Document, path: Path) -> None:
        path.write_text(render(doc), encoding="utf-8")

    return write  # type: ignore[return-value]


def _writer(fmt: Format) -> Callable[[Document, Path], int | None]:
    # Imported here: python-pptx and WeasyPrint load only when their format is asked for.
    if fmt == "md":
        from tether.artifacts.markdown import to_markdown

        return _write_text(to_markdown)
    if fmt == "html":
        from tether.artifacts.html import to_html

        return _write_text(to_html)
    if fmt == "pptx":
        from tether.artifacts.pptxdraw import write_pptx

        return write_pptx
    from tether.artifacts.pdf import write_pdf

    return write_pdf


def build_one(doc: Document, fmt: Format, folder: Path, stem: str) -> Built:
    """Write one format to ``folder/stem.fmt`` through a temporary file and a rename."""
    target = folder / f"{stem}.{fmt}"
    handle, temp_name = tempfile.mkstemp(prefix=f".{fmt}-", suffix=".part", dir=folder)
    os.close(handle)
    temp = Path(temp_name)
    try:
        count = _writer(fmt)(doc, temp)
        os.chmod(temp, FILE_MODE)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    size = target.stat().st_size
    return Built(
        format=fmt, path=target, size=size,
        pages=count if fmt == "pdf" else None, slides=count if fmt == "pptx" else None,
    )  # fmt: skip


def build(
    doc: Document,
    formats: Iterable[str],
    folder: str | os.PathLike[str],
    stem: str,
    before_each: Callable[[Format, int], None] | None = None,
) -> list[Built]:
    """Write ``doc`` as each of ``formats`` into ``folder`` (which must exist) named ``stem.<format>``.

    ``before_each(format, index)`` runs before each file (progress reports, stop checks); whatever it
    raises ends the build with the files written so far complete and nothing half-written.
    """
    chosen = check_formats(formats)
    if not _STEM_RE.match(stem) or len(stem) > MAX_STEM_CHARS:
        raise DocumentError(
            f"{stem!r} is not a file name stem: up to {MAX_STEM_CHARS} characters, no path separators, "
            "not starting with a dot or a space"
        )
    target = Path(folder)
    if not target.is_dir():
        raise DocumentError(f"the folder {target} does not exist")
    built: list[Built] = []
    for index, fmt in enumerate(chosen):
        if before_each is not None:
            before_each(fmt, index)
        built.append(build_one(doc, fmt, target, stem))
    return built
