"""Line breaking and box filling with real font metrics: what keeps slide text inside its boxes.

The breaker allows a line break only where every renderer allows one too — after a space, and between
two CJK characters unless the Chinese/Japanese line-start and line-end rules forbid it (no line starts
with "，。）」", none ends with "（「“") — and nowhere else: no break inside a Latin word, none between
Latin and CJK. A word longer than a whole line is broken between characters, as renderers do. A
renderer with more break opportunities fits at least as much on each line, so it never needs more
lines than counted here; widths are measured without kerning and only ``WIDTH_SAFETY`` of a box's width
is used, so a renderer's own rounding cannot push a line over either.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tether.artifacts.fonts import Measurer

WIDTH_SAFETY = 0.95  # the share of a box's width a line may fill
HEIGHT_SLACK_PT = 2.0  # kept free at the bottom of every box
LINE_FACTOR_MIN = 1.45  # line pitch in em; at least the font's natural ascent + descent
SPACE_BEFORE_EM = 0.45  # space above each paragraph, in em of its size
# LibreOffice (and Word's "autospace") put about a quarter em between CJK and Latin neighbours.
AUTOSPACE_EM = 0.25

NO_LINE_START = frozenset(
    "，。、；：？！）》」』】〕〉”’…‥—～·・ー々ゝゞヽヾぁぃぅぇぉっゃゅょゎァィゥェォッャュョヮ,.;:?!)]}%°′″℃"
)
NO_LINE_END = frozenset("（《「『【〔〈“‘([{£¥$＄￥")


def is_cjk(char: str) -> bool:
    point = ord(char)
    return (
        0x2E80 <= point <= 0x9FFF  # radicals, kana, CJK symbols and punctuation, ideographs
        or 0xAC00 <= point <= 0xD7AF  # hangul
        or 0xF900 <= point <= 0xFAFF
        or 0xFE30 <= point <= 0xFE4F
        or 0xFF00 <= point <= 0xFFEF  # full-width forms
        or 0x20000 <= point <= 0x3FFFF
    )


def _breakable(before: str, after: str) -> bool:
    """May a line break between these two adjacent non-space characters?"""
    return is_cjk(before) and is_cjk(after) and after not in NO_LINE_START and before not in NO_LINE_END


def _autospaced(before: str, after: str) -> bool:
    return not before.isspace() and not after.isspace() and is_cjk(before) != is_cjk(after)


def text_em(text: str, measure: Measurer) -> float:
    """The width of ``text`` in em, with the space a renderer puts between CJK and Latin neighbours."""
    width = measure.width_em(text)
    cjk = [is_cjk(char) for char in text]
    for i in range(1, len(text)):
        if cjk[i] != cjk[i - 1] and not text[i].isspace() and not text[i - 1].isspace():
            width += AUTOSPACE_EM
    return width


def _tokens(text: str) -> Iterator[tuple[int, int, bool]]:
    """``(start, end, is_space)`` runs: a break is allowed only at a run boundary."""
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text):
            yield start, i, text[start].isspace()
            return
        before, after = text[i - 1], text[i]
        space_b, space_a = before.isspace(), after.isspace()
        if space_b != space_a or (not space_b and _breakable(before, after)):
            yield start, i, space_b
            start = i


def wrap(text: str, width_pt: float, size_pt: float, measure: Measurer) -> list[tuple[int, int]]:
    """Greedy line breaking of one paragraph: ``(start, end)`` spans of ``text``, one per line,
    without the spaces at the break. Empty text is one empty line."""
    if not text:
        return [(0, 0)]
    limit = width_pt / size_pt  # in em
    lines: list[tuple[int, int]] = []
    line_start: int | None = None
    line_end = 0
    used = 0.0
    pending = 0.0  # the width of spaces between the line so far and the next word
    for start, end, space in _tokens(text):
        if space:
            if line_start is not None:
                pending += measure.width_em(text[start:end])
            continue
        width = text_em(text[start:end], measure)
        if line_start is not None and used + pending + width <= limit:
            used += pending + width
            line_end, pending = end, 0.0
            continue
        if line_start is not None:
            lines.append((line_start, line_end))
        line_start, used, pending = start, 0.0, 0.0
        if width <= limit:
            used, line_end = width, end
            continue
        # A word wider than a line: break it between characters (at least one per line).
        pos = start
        while pos < end:
            piece_used = 0.0
            cut = pos
            while cut < end:
                char_w = measure.char_em(text[cut])
                if cut > pos and _autospaced(text[cut - 1], text[cut]):
                    char_w += AUTOSPACE_EM
                if cut > pos and piece_used + char_w > limit:
                    break
                piece_used += char_w
                cut += 1
            if cut < end:
                lines.append((pos, cut))
                pos = cut
            else:
                line_start, line_end, used = pos, end, piece_used
                pos = end
    if line_start is not None:
        lines.append((line_start, line_end))
    return lines or [(0, 0)]


def line_pitch(size_pt: float, measure: Measurer) -> float:
    """The distance between baselines, in points, rounded up to the 1/100 pt that PPTX stores."""
    factor = max(LINE_FACTOR_MIN, measure.line_height_em)
    return math.ceil(size_pt * factor * 100) / 100


def space_before(size_pt: float) -> float:
    return math.ceil(size_pt * SPACE_BEFORE_EM * 100) / 100


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """One paragraph of a stream; ``bullet`` ones are drawn with a bullet and a hanging indent."""

    text: str
    bullet: bool = False
    link: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Piece:
    """What one box shows of a block: all of it, or the lines that fit (``continued`` when the block
    began in an earlier box, so it is drawn without a second bullet)."""

    text: str
    bullet: bool
    continued: bool
    link: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Box:
    """A text box's usable inside, in points (its size less its insets)."""

    width: float
    height: float
    bullet_indent: float = 0.0

    def text_width(self, block: Block) -> float:
        return (self.width - (self.bullet_indent if block.bullet else 0.0)) * WIDTH_SAFETY


def block_height(lines: int, size_pt: float, measure: Measurer) -> float:
    return space_before(size_pt) + lines * line_pitch(size_pt, measure)


def flow(blocks: Sequence[Block], box: Box, size_pt: float, measure: Measurer) -> list[list[Piece]]:
    """Pour ``blocks`` into as many boxes like ``box`` as they need, in order. A block that does not
    fit in what is left of a box moves whole to the next one when it fits in an empty box; one taller
    than a box is split between lines. Every character of every block ends up in exactly one piece."""
    pitch = line_pitch(size_pt, measure)
    before = space_before(size_pt)
    room = box.height - HEIGHT_SLACK_PT
    boxes: list[list[Piece]] = [[]]
    used = 0.0
    for block in blocks:
        spans = wrap(block.text, box.text_width(block), size_pt, measure)
        need = before + len(spans) * pitch
        if used + need > room and boxes[-1] and need <= room:
            boxes.append([])
            used = 0.0
        first = 0
        while first < len(spans):
            fit = int((room - used - before) // pitch) if room - used - before >= pitch else 0
            if fit <= 0:
                if not boxes[-1]:  # not even one line fits in an empty box: a box too small for this size
                    raise ValueError(f"a box {box.height:.0f} pt high cannot hold one line at {size_pt} pt")
                boxes.append([])
                used = 0.0
                continue
            last = min(len(spans), first + fit)
            text = block.text[spans[first][0] : spans[last - 1][1]]
            boxes[-1].append(Piece(text=text, bullet=block.bullet, continued=first > 0, link=block.link))
            used += before + (last - first) * pitch
            first = last
    return boxes


def fits(blocks: Sequence[Block], box: Box, size_pt: float, measure: Measurer, boxes: int = 1) -> bool:
    return len(flow(blocks, box, size_pt, measure)) <= boxes


def largest_fitting(
    blocks: Sequence[Block], box: Box, sizes: Sequence[float], measure: Measurer, boxes: int = 1
) -> float | None:
    """The largest of ``sizes`` (tried from the first) at which ``blocks`` fit in ``boxes`` boxes."""
    for size in sizes:
        if fits(blocks, box, size, measure, boxes):
            return size
    return None
