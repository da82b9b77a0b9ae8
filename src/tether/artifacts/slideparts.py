"""The parts of a slide that are not plain text boxes, and the document's blocks as slide text.

``to_blocks`` turns a section's paragraphs, headings, lists, code and quotes into measured text blocks
(``textfit.Block``): emphasis as runs, list levels as indents, numbers as the list's own numbers,
code line by line in the monospace face with every leading space kept. ``plan_table`` lays a table out
as a real table shape — column widths from the measured text, font size the largest that fits, rows
split over as many slides as they need with the header repeated — and ``plan_picture`` fits a picture
into its box without distorting it. Text is passed through ``fonts.drawable`` first, so a character
no installed font has is dropped rather than drawn as a box.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tether.artifacts.document import Code, Image, ListBlock, Paragraph, Quote, Span, Subheading, Table, plain
from tether.artifacts.fonts import Measurer, drawable
from tether.artifacts.textfit import WIDTH_SAFETY, Block, Box, Run, line_pitch, wrap

AnyBlock = Paragraph | Subheading | Code | Table | Image | ListBlock | Quote
Rect = tuple[float, float, float, float]

CODE_SCALE = 0.72  # code against the body size: a listing needs more characters per line than prose
CODE_COLOR, QUOTE_COLOR, MUTED = "1E293B", "4B5563", "6B7280"
HEADING_SCALE = 1.08
MARKERS = ("•", "◦", "▪")
TABLE_SIZES = (20, 18, 16, 14, 12)
TABLE_SPLIT_SIZE = 14
TABLE_MIN_SIZE = 10
CELL_MARGIN_X, CELL_MARGIN_Y = 5.0, 3.6
MIN_COLUMN_PT = 48.0
CAPTION_H = 46.0
CAPTION_SIZE = 14
MAX_UPSCALE = 2.0  # a small picture is enlarged at most this much
MIN_SHARE_BELOW = 0.25  # of the body: the least room under a text that a table may take
MIN_PICTURE_SHARE = 0.45  # of the body: the least room under a text that a picture may take


def runs_of(
    spans: Sequence[Span], *, bold: bool = False, italic: bool = False
) -> tuple[str, tuple[Run, ...]]:
    """The drawable text of ``spans`` and the runs that style it."""
    text, runs = "", []
    for span in spans:
        piece = drawable(span.text)
        if not piece:
            continue
        runs.append(
            Run(
                start=len(text),
                end=len(text) + len(piece),
                bold=span.bold or bold,
                italic=span.italic or italic,
                code=span.code,
                strike=span.strike,
                link=span.link,
            )
        )
        text += piece
    return text, tuple(runs)


def to_blocks(blocks: Sequence[AnyBlock], level: int = 0, italic: bool = False) -> list[Block]:
    """A section's (or a list item's) blocks as slide text, in order."""
    out: list[Block] = []
    color = QUOTE_COLOR if italic else None
    for block in blocks:
        if isinstance(block, Paragraph):
            text, runs = runs_of(block.spans, italic=italic)
            if text:
                out.append(Block(text=text, runs=runs, level=level, italic=italic, color=color))
        elif isinstance(block, Subheading):
            text, runs = runs_of(block.spans, bold=True)
            if text:
                out.append(Block(text=text, runs=runs, level=level, bold=True, scale=HEADING_SCALE))
        elif isinstance(block, Code):
            for index, line in enumerate(drawable(block.text).split("\n")):
                out.append(
                    Block(
                        text=line, mono=True, tight=index > 0, scale=CODE_SCALE, level=level, color=CODE_COLOR
                    )
                )
        elif isinstance(block, ListBlock):
            out += _list_blocks(block, level)
        elif isinstance(block, Quote):
            out += to_blocks(block.blocks, level + 1, italic=True)
        elif isinstance(block, Table):  # a table inside a list or a quote: its rows as lines
            for row in (block.header, *block.rows):
                line = " | ".join(drawable(plain(cell)) for cell in row)
                out.append(Block(text=line, level=level, mono=True, scale=CODE_SCALE, tight=True))
        elif block.alt or block.src:  # a picture inside a list or a quote: its alt text
            out.append(
                Block(text=f"[{drawable(block.alt or block.src)}]", level=level, italic=True, color=MUTED)
            )
    return out


def _list_blocks(block: ListBlock, level: int) -> list[Block]:
    out: list[Block] = []
    for index, item in enumerate(block.items):
        inner = list(item.blocks)
        text, runs = "", ()
        first = inner[0] if inner else None
        if isinstance(first, Paragraph):
            text, runs = runs_of(first.spans)
            inner.pop(0)
        number = block.start + index if block.ordered else None
        marker = MARKERS[min(level, len(MARKERS) - 1)]
        prefix = "" if item.checked is None else ("☑ " if item.checked else "☐ ")
        if number is not None and number < 1:  # slide numbering starts at 1: a 0 is written out
            prefix, number, marker = f"{number}. " + prefix, None, ""
        if prefix:
            text = prefix + text
            runs = tuple(replace(r, start=r.start + len(prefix), end=r.end + len(prefix)) for r in runs)
        out.append(
            Block(
                text=text,
                runs=runs,
                bullet=True,
                level=level + 1,
                number=number,
                marker=marker,
            )
        )
        out += to_blocks(inner, level + 1)
    return out


def is_text(block: AnyBlock) -> bool:
    """Flowed with the text around it: all but tables and pictures with a file to draw."""
    return not isinstance(block, Table) and not (isinstance(block, Image) and block.path)


# -- tables -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CellText:
    text: str
    runs: tuple[Run, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TableFrame:
    """One slide's part of a table: the header and the rows that fit, drawn as a table shape."""

    x: float
    y: float
    widths: tuple[float, ...]
    heights: tuple[float, ...]  # the header's, then each row's
    header: tuple[CellText, ...]
    rows: tuple[tuple[CellText, ...], ...]
    align: tuple[str, ...]
    size: float


def _cells(row: Sequence[Sequence[Span]], bold: bool = False) -> tuple[CellText, ...]:
    return tuple(CellText(text=text, runs=runs) for text, runs in (runs_of(cell, bold=bold) for cell in row))


def _longest_word_em(text: str, m: Measurer) -> float:
    return max((m.width_em(word) for word in text.split()), default=0.0)


def _widths(rows: Sequence[Sequence[CellText]], total: float, size: float, m: Measurer) -> list[float]:
    """Column widths filling ``total``: shares of each column's longest line, none narrower than its
    longest word allows (or ``MIN_COLUMN_PT``)."""
    cols = len(rows[0])
    pad = 2 * CELL_MARGIN_X
    natural = [max(m.width_em(row[c].text) for row in rows) * size / WIDTH_SAFETY + pad for c in range(cols)]
    floor = [
        min(max(MIN_COLUMN_PT, _longest_word_em_col(rows, c, m) * size / WIDTH_SAFETY + pad), total / cols)
        for c in range(cols)
    ]
    if sum(natural) <= total:
        return [n * total / sum(natural) for n in natural]
    widths = list(floor)
    spare = total - sum(widths)
    extra = [max(0.0, n - f) for n, f in zip(natural, floor, strict=True)]
    if spare > 0 and sum(extra) > 0:
        widths = [w + spare * e / sum(extra) for w, e in zip(widths, extra, strict=True)]
    return widths


def _longest_word_em_col(rows: Sequence[Sequence[CellText]], column: int, m: Measurer) -> float:
    return max(_longest_word_em(row[column].text, m) for row in rows)


def _row_height(row: Sequence[CellText], widths: Sequence[float], size: float, m: Measurer) -> float:
    lines = max(
        len(wrap(cell.text, (w - 2 * CELL_MARGIN_X) * WIDTH_SAFETY, size, m))
        for cell, w in zip(row, widths, strict=True)
    )
    return lines * line_pitch(size, m) + 2 * CELL_MARGIN_Y + 1.0


def _table_size(
    every: Sequence[Sequence[CellText]], w: float, h: float, m: Measurer
) -> tuple[float, list[float], list[float]]:
    """The largest size the whole table fits one slide at; else the largest from the split size down
    where the header and any one row fit a slide together."""
    for size in TABLE_SIZES:
        widths = _widths(every, w, size, m)
        heights = [_row_height(row, widths, size, m) for row in every]
        if sum(heights) <= h or (size <= TABLE_SPLIT_SIZE and max(heights[0] + hh for hh in heights) <= h):
            return size, widths, heights
    widths = _widths(every, w, TABLE_MIN_SIZE, m)
    return TABLE_MIN_SIZE, widths, [_row_height(row, widths, TABLE_MIN_SIZE, m) for row in every]


def plan_table(table: Table, rect: Rect, m: Measurer) -> list[TableFrame]:
    """The table over as few slides as it fits on, at the largest size that fits one slide (else at
    ``TABLE_SPLIT_SIZE`` or smaller, rows shared evenly over the slides, the header on each)."""
    header = _cells(table.header, bold=True)
    rows = [_cells(row) for row in table.rows]
    x, y, w, h = rect
    every = [header, *rows]
    size, widths, heights = _table_size(every, w, h, m)
    slices = _split_rows(heights[1:], h - heights[0])
    frames = []
    for first, last in slices:
        frames.append(
            TableFrame(
                x=x,
                y=y,
                widths=tuple(widths),
                heights=(heights[0], *heights[1 + first : 1 + last]),
                header=header,
                rows=tuple(rows[first:last]),
                align=tuple(table.align),
                size=size,
            )
        )
    return frames


def _split_rows(heights: Sequence[float], room: float) -> list[tuple[int, int]]:
    """Rows ``[first, last)`` per slide: as few slides as the rows need, the rows shared evenly."""

    def greedy(cap: float) -> list[tuple[int, int]]:
        out, first, used = [], 0, 0.0
        for index, height in enumerate(heights):
            if used + height > cap and index > first:
                out.append((first, index))
                first, used = index, 0.0
            used += height
        out.append((first, len(heights)))
        return out

    best = greedy(room)
    if len(best) < 2:
        return best
    low, high = sum(heights) / len(best), room
    for _ in range(12):
        middle = (low + high) / 2
        trial = greedy(middle)
        if len(trial) <= len(best):
            best, high = trial, middle
        else:
            low = middle
    return best


# -- pictures -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PictureFrame:
    path: str
    x: float
    y: float
    w: float
    h: float
    caption: str = ""
    caption_rect: Rect | None = None


def plan_picture(image: Image, rect: Rect) -> PictureFrame | None:
    """The picture as large as fits ``rect`` (a caption under it when it has alt text), centred, its
    proportions kept; None when its file cannot be read as a picture."""
    if not image.path:
        return None
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        with PILImage.open(image.path) as picture:
            pixel_w, pixel_h = picture.size
    except (OSError, UnidentifiedImageError):
        return None
    x, y, w, h = rect
    caption = drawable(image.alt)
    room_h = h - (CAPTION_H if caption else 0.0)
    scale = min(w / pixel_w, room_h / pixel_h, MAX_UPSCALE * 0.75)  # a pixel is 0.75 pt at 96 dpi
    pw, ph = max(1.0, pixel_w * scale), max(1.0, pixel_h * scale)
    px, py = x + (w - pw) / 2, y + (room_h - ph) / 2
    caption_rect = (x, py + ph + 4.0, w, CAPTION_H - 4.0) if caption else None
    return PictureFrame(path=image.path, x=px, y=py, w=pw, h=ph, caption=caption, caption_rect=caption_rect)


def fits_below(used: float, rect: Rect) -> Rect | None:
    """What is left of ``rect`` under ``used`` points of text, when that is a fair part of it (a table
    that does not fit there whole, or a picture that would be small, still gets a slide of its own)."""
    x, y, w, h = rect
    if used > h * (1 - MIN_SHARE_BELOW):
        return None
    top = math.ceil(used + 8.0)
    return (x, y + top, w, h - top)


def box_of(rect: Rect, inset: float, indent: float) -> Box:
    return Box(width=rect[2] - 2 * inset, height=rect[3] - 2 * inset, bullet_indent=indent)
