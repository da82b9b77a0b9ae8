"""The real renderer agrees: sample decks converted by LibreOffice keep every word inside its box.

LibreOffice (``soffice --headless``) turns the Chinese and the English sample decks into PDF in one run
with a private profile; ``pdftotext -bbox`` gives every word's box on every page, and each must lie
inside one of that slide's text frames (so inside the slide too). The pages are saved as PNG under
``.screenshots/artifacts/`` to be looked at. Without ``soffice`` the test is skipped, unless
``TETHER_TEST_REQUIRE_LIBREOFFICE=1`` (CI), where that is a failure.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.artifacts.deckcheck import FrameInfo, read_frames
from tests.artifacts.samples import EN, ZH
from tether.artifacts import from_markdown
from tether.artifacts.pptxdraw import write_pptx

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".screenshots" / "artifacts"
REQUIRE_ENV = "TETHER_TEST_REQUIRE_LIBREOFFICE"
CONVERT_TIMEOUT_S = 50
TOLERANCE_PT = 1.0
_WORD = re.compile(
    r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">(.*?)</word>|<page width'
)


def _tools() -> None:
    missing = [tool for tool in ("soffice", "pdftotext", "pdftoppm") if shutil.which(tool) is None]
    if not missing:
        return
    reason = f"{', '.join(missing)} not installed (Debian: libreoffice-impress, poppler-utils)"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
    pytest.skip(f"NOT RENDERED: {reason}; set {REQUIRE_ENV}=1 to make this a failure")


def _words(pdf: Path) -> list[list[tuple[float, float, float, float, str]]]:
    out = subprocess.run(
        ["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    pages: list[list[tuple[float, float, float, float, str]]] = []
    for match in _WORD.finditer(out):
        if match.group(5) is None:
            pages.append([])
        else:
            x0, y0, x1, y1 = (float(match.group(i)) for i in range(1, 5))
            pages[-1].append((x0, y0, x1, y1, html.unescape(match.group(5))))
    return pages


def _inside(word: tuple[float, float, float, float, str], frame: FrameInfo) -> bool:
    x0, y0, x1, y1, _ = word
    return (frame.x - TOLERANCE_PT <= x0 and x1 <= frame.x + frame.w + TOLERANCE_PT
            and frame.y - TOLERANCE_PT <= y0 and y1 <= frame.y + frame.h + TOLERANCE_PT)  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_libreoffice_draws_every_word_inside_its_box(tmp_path: Path) -> None:
    _tools()
    decks = {}
    for name, markdown in (("deck-zh", ZH), ("deck-en", EN)):
        path = tmp_path / f"{name}.pptx"
        write_pptx(from_markdown(markdown), path)
        decks[name] = path
    profile = tmp_path / "lo-profile"
    subprocess.run(
        ["soffice", f"-env:UserInstallation={profile.as_uri()}", "--headless", "--convert-to", "pdf",
         "--outdir", str(tmp_path), *map(str, decks.values())],
        capture_output=True, timeout=CONVERT_TIMEOUT_S, check=True,
    )  # fmt: skip
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name, deck in decks.items():
        pdf = tmp_path / f"{name}.pdf"
        assert pdf.is_file(), f"LibreOffice wrote no PDF for {name}"
        frames = read_frames(deck)
        pages = _words(pdf)
        assert len(pages) == max(frame.slide for frame in frames)
        outside = []
        for number, words in enumerate(pages, 1):
            boxes = [frame for frame in frames if frame.slide == number]
            assert words, f"{name}: slide {number} shows no text"
            outside += [f"{name} slide {number}: {word[4]!r} at {word[:4]}" for word in words
                        if not any(_inside(word, box) for box in boxes)]  # fmt: skip
        assert outside == []
        text = "".join(word[4] for page in pages for word in page)
        if name == "deck-zh":
            assert "社区参与" in text and "（续）" in text
        fonts = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True).stdout
        assert "NotoSansCJK" in fonts.replace("-", "").replace(" ", "")
        for old in SCREENSHOTS.glob(f"{name}-*.png"):
            old.unlink()
        subprocess.run(["pdftoppm", "-png", "-r", "50", str(pdf), str(SCREENSHOTS / name)], check=True)
    assert len(list(SCREENSHOTS.glob("deck-*.png"))) >= 10
