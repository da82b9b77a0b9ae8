"""The fonts documents are set in, and a text measurer with their real metrics.

Every builder uses one family, Noto Sans CJK SC (Debian ``fonts-noto-cjk``): it carries Chinese, Latin
and digits, so what the slide planner measures is what LibreOffice, PowerPoint or WeasyPrint draws, and
the PDF embeds exactly that font. The font is found through fontconfig (``fc-match``), then at the
known Debian paths; when it is missing, the error names the package to install.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tether.artifacts.document import DocumentError

FAMILY = "Noto Sans CJK SC"
DEBIAN_PACKAGE = "fonts-noto-cjk"
# Where Debian and Ubuntu put the collections; the SC face is index 2 in both.
KNOWN_PATHS = {
    "regular": (
        "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
        "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    ),
    "bold": (
        "/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc",
        "/usr/share/fonts/noto-cjk/NotoSansCJK-Bold.ttc",
    ),
}
KNOWN_INDEX = 2
FC_MATCH_TIMEOUT_S = 10.0
# Units the advance widths are cached in: widths scale linearly with the size, so one size serves all.
UNITS_PER_EM = 1000

Weight = Literal["regular", "bold"]


class FontMissing(DocumentError):
    """The CJK font is not installed."""

    code = "font_missing"


@dataclass(frozen=True, slots=True, kw_only=True)
class FontFile:
    path: Path
    index: int
    family: str


def _fc_match(weight: Weight) -> FontFile | None:
    if shutil.which("fc-match") is None:
        return None
    style = "Bold" if weight == "bold" else "Regular"
    try:
        out = subprocess.run(
            ["fc-match", "-f", "%{file}|%{index}|%{family}", f"{FAMILY}:style={style}"],
            capture_output=True, text=True, timeout=FC_MATCH_TIMEOUT_S, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    path, _, rest = out.partition("|")
    index, _, family = rest.partition("|")
    # fc-match always answers with *some* font; only a Noto CJK one will do.
    if "NotoSansCJK" not in path.replace(" ", "") or not Path(path).is_file():
        return None
    return FontFile(path=Path(path), index=int(index or 0), family=family.split(",")[0] or FAMILY)


@functools.cache
def find_font(weight: Weight = "regular") -> FontFile:
    """The Noto Sans CJK SC face of this weight; ``FontMissing`` names the package when there is none."""
    found = _fc_match(weight)
    if found is not None:
        return found
    for candidate in KNOWN_PATHS[weight]:
        if Path(candidate).is_file():
            return FontFile(path=Path(candidate), index=KNOWN_INDEX, family=FAMILY)
    raise FontMissing(
        f"the {FAMILY} font ({weight}) is not installed; documents in Chinese need it. "
        f"Install the Debian/Ubuntu package '{DEBIAN_PACKAGE}' (apt-get install {DEBIAN_PACKAGE}), "
        "or Noto Sans CJK from https://github.com/notofonts/noto-cjk",
        package=DEBIAN_PACKAGE,
    )


@dataclass(slots=True)
class Measurer:
    """Advance widths of text in one face, from the font's own metrics, cached per character.

    Widths are summed without kerning: kerning only ever narrows Latin pairs by a little, so the sum
    is never narrower than what a renderer draws, which is the side a layout must err on.
    """

    font: FontFile
    ascent: float = 0.0  # in em
    descent: float = 0.0
    _widths: dict[str, float] = field(default_factory=dict)
    _face: object = None

    def __post_init__(self) -> None:
        from PIL import ImageFont

        face = ImageFont.truetype(
            str(self.font.path), UNITS_PER_EM, index=self.font.index, layout_engine=ImageFont.Layout.BASIC
        )
        ascent, descent = face.getmetrics()
        self.ascent, self.descent = ascent / UNITS_PER_EM, descent / UNITS_PER_EM
        self._face = face

    @property
    def line_height_em(self) -> float:
        """The font's natural line height (ascent + descent) in em: what a renderer uses at 100%."""
        return self.ascent + self.descent

    def char_em(self, char: str) -> float:
        width = self._widths.get(char)
        if width is None:
            width = float(self._face.getlength(char)) / UNITS_PER_EM  # type: ignore[attr-defined]
            self._widths[char] = width
        return width

    def width_em(self, text: str) -> float:
        widths = self._widths
        total = 0.0
        for char in text:
            width = widths.get(char)
            total += width if width is not None else self.char_em(char)
        return total

    def width_pt(self, text: str, size_pt: float) -> float:
        return self.width_em(text) * size_pt


@functools.cache
def measurer(weight: Weight = "regular") -> Measurer:
    """The shared measurer of one weight (loading a .ttc face costs milliseconds; do it once)."""
    return Measurer(find_font(weight))
