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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from tether.artifacts.fonts import Measurer

WIDTH_SAFETY = 0.95  # the share of a box's width a line may fill
HEIGHT_SLACK_PT = 2.0  # kept free at the bottom of every box
LINE_FACTOR_MIN = 1.45  # line pitch in em; at least the font's natural ascent + descent
SPACE_BEFORE_EM = 0.45  # space above each paragraph, in em of its size
# LibreOffice (and Word's "autospace") put about a quarter em between CJK and Latin neighbours.
AUTOSPACE_EM = 0.25
BALANCE_STEPS = 12  # bisection steps when sharing text evenly over boxes (1/4096 of a box's height)

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
class Run:
    """The style of ``text[start:end]`` of a block."""

    start: int
    end: int
    bold: bool = False
    italic: bool = False
    code: bool = False
    strike: bool = False
    link: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """One paragraph of a stream. ``bullet`` ones are drawn with a marker (``number`` for an ordered
    list) and a hanging indent at their ``level``; ``mono`` ones (code lines) keep every space and break
    anywhere; ``scale`` sizes the block against the stream's size; ``runs`` style parts of the text."""

    text: str
    bullet: bool = False
    link: str | None = None
    level: int = 0  # indent levels (a nested list item, a quote)
    number: int | None = None
    marker: str = "•"
    mono: bool = False
    tight: bool = False  # no space before (the second and later lines of a code block)
    scale: float = 1.0
    bold: bool = False
    italic: bool = False
    color: str | None = None
    runs: tuple[Run, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Piece:
    """What one box shows of a block: all of it, or the lines that fit (``continued`` when the block
    began in an earlier box, so it is drawn without a second bullet); ``start`` is where ``text``
    begins in the block's text."""

    text: str
    bullet: bool
    continued: bool
    link: str | None
    block: Block | None = None
    start: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Box:
    """A text box's usable inside, in points (its size less its insets)."""

    width: float
    height: float
    bullet_indent: float = 0.0

    def indent(self, block: Block) -> float:
        return self.bullet_indent * (block.level + (1 if block.bullet and not block.level else 0))

    def text_width(self, block: Block) -> float:
        return (self.width - self.indent(block)) * WIDTH_SAFETY


def wrap_anywhere(text: str, width_pt: float, size_pt: float, measure: Measurer) -> list[tuple[int, int]]:
    """Lines of code: every character kept (leading spaces above all), a break wherever the width ends."""
    limit = width_pt / size_pt
    lines: list[tuple[int, int]] = []
    start, used = 0, 0.0
    for index, char in enumerate(text):
        width = measure.char_em(char)
        if index > start and used + width > limit:
            lines.append((start, index))
            start, used = index, 0.0
        used += width
    lines.append((start, len(text)))
    return lines


def block_height(lines: int, size_pt: float, measure: Measurer) -> float:
    return space_before(size_pt) + lines * line_pitch(size_pt, measure)


Fonts = Mapping[str, Measurer]  # "regular", and optionally "mono" and "widest"


def _measure_for(block: Block, measure: Measurer, fonts: Fonts | None) -> Measurer:
    if fonts is None:
        return measure
    if block.mono:
        return fonts.get("mono", measure)
    if block.bold or any(run.bold or run.code for run in block.runs):
        return fonts.get("widest", measure)
    return measure


def block_lines(block: Block, box: Box, size_pt: float, measure: Measurer) -> list[tuple[int, int]]:
    size = size_pt * block.scale
    if block.mono:
        return wrap_anywhere(block.text, box.text_width(block), size, measure)
    return wrap(block.text, box.text_width(block), size, measure)


def flow(
    blocks: Sequence[Block], box: Box, size_pt: float, measure: Measurer, fonts: Fonts | None = None
) -> list[list[Piece]]:
    """Pour ``blocks`` into as many boxes like ``box`` as they need, in order. A block that does not
    fit in what is left of a box moves whole to the next one when it fits in an empty box; one taller
    than a box is split between lines. Every character of every block ends up in exactly one piece."""
    room = box.height - HEIGHT_SLACK_PT
    boxes: list[list[Piece]] = [[]]
    used = 0.0
    for block in blocks:
        m = _measure_for(block, measure, fonts)
        pitch = line_pitch(size_pt * block.scale, m)
        before = 0.0 if block.tight else space_before(size_pt * block.scale)
        spans = block_lines(block, box, size_pt, m)
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
            start, end = spans[first][0], spans[last - 1][1]
            boxes[-1].append(Piece(text=block.text[start:end], bullet=block.bullet, continued=first > 0,
                                   link=block.link, block=block, start=start))  # fmt: skip
            used += before + (last - first) * pitch
            first = last
    return boxes


def balanced(
    blocks: Sequence[Block], box: Box, size_pt: float, measure: Measurer, fonts: Fonts | None = None
) -> list[list[Piece]]:
    """``flow``, with the text shared evenly over the boxes it needs: the lowest box height that still
    needs no more boxes is found by bisection, so a section never ends on a slide of one line."""
    boxes = flow(blocks, box, size_pt, measure, fonts)
    if len(boxes) < 2:
        return boxes
    low, high = box.height / len(boxes), box.height
    best = boxes
    for _ in range(BALANCE_STEPS):
        middle = (low + high) / 2
        try:
            trial = flow(blocks, Box(width=box.width, height=middle, bullet_indent=box.bullet_indent),
                         size_pt, measure, fonts)  # fmt: skip
        except ValueError:
            trial = None
        if trial is not None and len(trial) <= len(boxes):
            best, high = trial, middle
        else:
            low = middle
    return best


def fits(
    blocks: Sequence[Block], box: Box, size_pt: float, measure: Measurer, boxes: int = 1,
    fonts: Fonts | None = None,
) -> bool:  # fmt: skip
    return len(flow(blocks, box, size_pt, measure, fonts)) <= boxes


def largest_fitting(
    blocks: Sequence[Block], box: Box, sizes: Sequence[float], measure: Measurer, boxes: int = 1,
    fonts: Fonts | None = None,
) -> float | None:  # fmt: skip
    """The largest of ``sizes`` (tried from the first) at which ``blocks`` fit in ``boxes`` boxes."""
    for size in sizes:
        try:
            if fits(blocks, box, size, measure, boxes, fonts):
                return size
        except ValueError:  # one line of this size is taller than the box
            continue
    return None
