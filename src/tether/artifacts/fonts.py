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
MONO_FAMILY = "Noto Sans Mono CJK SC"  # code: the same collection's monospace face, CJK included
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
KNOWN_MONO_INDEX = 7  # Noto Sans Mono CJK SC in the regular collection
# Characters no font draws are dropped, not drawn as boxes; each distinct one outside the main font is
# looked up once in fontconfig (a fallback such as an emoji font draws it), at most this many per process.
MAX_FALLBACK_LOOKUPS = 256
# Invisible joiners and variation selectors of emoji sequences: shown as boxes by some renderers.
INVISIBLE = frozenset("\u200d\ufe0e\ufe0f\u20e3")
FC_MATCH_TIMEOUT_S = 10.0
# Units the advance widths are cached in: widths scale linearly with the size, so one size serves all.
UNITS_PER_EM = 1000

Weight = Literal["regular", "bold", "mono"]


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
    family = MONO_FAMILY if weight == "mono" else FAMILY
    try:
        out = subprocess.run(
            ["fc-match", "-f", "%{file}|%{index}|%{family}", f"{family}:style={style}"],
            capture_output=True, text=True, timeout=FC_MATCH_TIMEOUT_S, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    path, _, rest = out.partition("|")
    index, _, family = rest.partition("|")
    # fc-match always answers with *some* font; only a Noto CJK one will do.
    if "NotoSansCJK" not in path.replace(" ", "") or not Path(path).is_file():
        return None
    if weight == "mono" and "Mono" not in family:
        return None
    return FontFile(path=Path(path), index=int(index or 0), family=family.split(",")[0] or FAMILY)


@functools.cache
def find_font(weight: Weight = "regular") -> FontFile:
    """The Noto Sans CJK SC face of this weight; ``FontMissing`` names the package when there is none."""
    found = _fc_match(weight)
    if found is not None:
        return found
    for candidate in KNOWN_PATHS["bold" if weight == "bold" else "regular"]:
        if Path(candidate).is_file():
            if weight == "mono":
                return FontFile(path=Path(candidate), index=KNOWN_MONO_INDEX, family=MONO_FAMILY)
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


class Widest(Measurer):
    """Each character at the widest of the regular, bold and monospace faces: text with bold or code
    runs in it is measured so that no mix of those runs can be wider than counted."""

    def __init__(self) -> None:
        super().__init__(find_font("regular"))
        self._others = (measurer("bold"), measurer("mono"))

    def char_em(self, char: str) -> float:
        width = self._widths.get(char)
        if width is None:
            width = max(super().char_em(char), *(m.char_em(char) for m in self._others))
            self._widths[char] = width
        return width


@functools.cache
def widest() -> Widest:
    return Widest()


@functools.cache
def _main_cmap() -> frozenset[int]:
    from fontTools.ttLib import TTCollection

    font = find_font("regular")
    collection = TTCollection(str(font.path), lazy=True)
    try:
        return frozenset(collection.fonts[font.index].getBestCmap())
    finally:
        collection.close()


@functools.cache
def _fallback_draws(char: str) -> bool:
    """Does some installed font (an emoji font, DejaVu…) have this character? Asked of fontconfig."""
    if shutil.which("fc-list") is None:
        return False
    try:
        out = subprocess.run(
            ["fc-list", f":charset={ord(char):x}", "family"],
            capture_output=True, text=True, timeout=FC_MATCH_TIMEOUT_S, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(out.strip())


def drawable(text: str) -> str:
    """``text`` without the characters no installed font draws (they would show as empty boxes) and
    without emoji joiners and variation selectors; what a fallback font draws (emoji, symbols) stays."""
    cmap = _main_cmap()
    if all(ord(char) in cmap or char.isspace() for char in text):
        return text
    kept: list[str] = []
    dropped = False  # the space after a dropped emoji goes too when one is before it: "a 🚀 b" → "a b"
    for char in text:
        if char in INVISIBLE:
            continue
        if char == " " and dropped and (not kept or kept[-1] == " "):
            dropped = False
            continue
        looked_up = _fallback_draws.cache_info().currsize < MAX_FALLBACK_LOOKUPS
        if ord(char) in cmap or char.isspace() or ord(char) < 0x2000 or (looked_up and _fallback_draws(char)):
            kept.append(char)
            dropped = False
        else:
            dropped = True
    return "".join(kept)
