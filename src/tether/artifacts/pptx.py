"""16:9 slide decks whose text never overflows its boxes.

``plan_deck`` decides everything — which layout each section gets, the font size of every box, where
a section splits into continuation slides — by measuring the text with the font's real metrics
(``textfit``); ``pptxdraw.write_pptx`` only draws the plan with python-pptx. Layouts, chosen per section by
density:

- ``title``: a heading and a line or two, centred (short sections, and the deck's title slide);
- ``two-column``: many short bullets, flowing down the left column and on into the right;
- ``bullets-details``: a few bullets on the left, longer paragraphs in a panel on the right;
- ``bullets``: paragraphs and bullets in one column, in their order (everything else);
- ``table`` and ``picture``: a section with tables, pictures, code, nested or numbered lists keeps its
  blocks in order (``structured``): text flows over slides, each table (split by rows when long, its
  header repeated) and picture gets its slide, or joins a short text above it.

Each box tries its sizes from the largest down; when a section does not fit one slide even at the
smallest, it is split at a readable size over slides titled "… (cont.)" / "…（续）", the text shared
evenly between them (never a last slide of one line). A sources slide
lists every source with its URL. Every box fixes its size, insets and line pitch, and turns autofit
off, so PowerPoint and LibreOffice lay out what was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from tether.artifacts.document import Document, Language, ListBlock, Paragraph, Section, Table
from tether.artifacts.fonts import Measurer, drawable, measurer, widest
from tether.artifacts.slideparts import (
    CAPTION_SIZE,
    MIN_PICTURE_SHARE,
    MIN_SHARE_BELOW,
    PictureFrame,
    TableFrame,
    fits_below,
    is_text,
    plan_picture,
    plan_table,
    to_blocks,
)
from tether.artifacts.textfit import (
    HEIGHT_SLACK_PT,
    Block,
    Box,
    Piece,
    balanced,
    block_lines,
    flow,
    largest_fitting,
    line_pitch,
    space_before,
)

if TYPE_CHECKING:
    pass

Layout = Literal["title", "two-column", "bullets-details", "bullets", "sources", "table", "picture"]
Align = Literal["left", "center"]
Anchor = Literal["top", "middle", "bottom"]

SLIDE_W, SLIDE_H = 960.0, 540.0  # points: 13.333 in x 7.5 in, 16:9
EMU_PER_PT = 12700
INSET = 7.2  # every box's inner margin, points
BULLET_INDENT = 20.0
MARGIN_X = 43.2
TITLE_BOX = (MARGIN_X, 24.0, SLIDE_W - 2 * MARGIN_X, 82.0)
BODY_TOP, BODY_BOTTOM = 118.0, 510.0
COLUMN_GAP = 21.6

# Font sizes each kind of box may use, largest first; the split size is for continuation slides.
TITLE_SIZES = (32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10)
DECK_TITLE_SIZES = (44, 40, 36, 32, 28, 26, 24, 22, 20, 18, 16, 14, 12)
SUBTITLE_SIZES = (24, 22, 20, 18, 16, 14, 12, 10)
CENTRED_HEADING_SIZES = (40, 36, 32, 28, 26, 24, 22, 20, 18, 16, 14, 12)
CENTRED_TEXT_SIZES = (24, 22, 20, 18)
BODY_SIZES = (28, 26, 24, 22, 20, 18, 16)
COLUMN_SIZES = (24, 22, 20, 18, 16)
DETAIL_SIZES = (20, 18, 16, 14)
SOURCE_SIZES = (20, 18, 16, 14, 12)
BODY_SPLIT_SIZE = 18
DETAIL_SPLIT_SIZE = 16
SOURCE_SPLIT_SIZE = 14

# Density thresholds, in em of the body font (a CJK character is 1 em, a Latin letter about 0.55).
CENTRED_MAX_EM = 60.0
SHORT_BULLET_MAX_EM = 22.0
TWO_COLUMN_MIN_BULLETS = 6
DETAILS_MAX_BULLETS = 5
DETAILS_MIN_PARAGRAPH_EM = 40.0

TITLE_COLOR, TEXT_COLOR, MUTED_COLOR = "1F2937", "374151", "6B7280"
ACCENT_COLOR, PANEL_COLOR = "2563EB", "F1F5F9"
ACCENT_RULE = (430.0, 298.0, 100.0, 3.0)  # x, y, w, h under the deck's title

LABELS: dict[Language, dict[str, str]] = {
    "zh": {"cont": "（续）", "sources": "来源", "overview": "概述"},
    "en": {"cont": " (cont.)", "sources": "Sources", "overview": "Overview"},
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """One text box: position and size in points, and what it shows at which size."""

    name: str
    x: float
    y: float
    w: float
    h: float
    pieces: tuple[Piece, ...]
    size: float
    bold: bool = False
    color: str = TEXT_COLOR
    align: Align = "left"
    anchor: Anchor = "top"
    fill: str | None = None

    @property
    def box(self) -> Box:
        return Box(width=self.w - 2 * INSET, height=self.h - 2 * INSET, bullet_indent=BULLET_INDENT)


@dataclass(frozen=True, slots=True, kw_only=True)
class SlidePlan:
    layout: Layout
    frames: tuple[Frame, ...]
    notes: str = ""
    accent: bool = False  # a thin rule under the title (title slide)
    tables: tuple[TableFrame, ...] = ()
    pictures: tuple[PictureFrame, ...] = ()


@dataclass(slots=True)
class _Planner:
    lang: Language
    m: Measurer = field(default_factory=lambda: measurer("regular"))
    bold: Measurer = field(default_factory=lambda: measurer("bold"))
    fonts: dict[str, Measurer] = field(
        default_factory=lambda: {"regular": measurer("regular"), "mono": measurer("mono"), "widest": widest()}
    )

    def label(self, key: str) -> str:
        return LABELS[self.lang][key]

    def frame(self, name: str, rect: tuple[float, float, float, float], text: str, sizes: Sequence[float],
              *, bold: bool = False, **style: object) -> Frame:  # fmt: skip
        """A one-paragraph box at the largest size that fits; the smallest size always does for the
        bounded titles and headings the document model allows."""
        x, y, w, h = rect
        probe = Box(width=w - 2 * INSET, height=h - 2 * INSET)
        blocks = [Block(text=drawable(text).strip())]
        font = self.bold if bold else self.m
        size = largest_fitting(blocks, probe, sizes, font) or sizes[-1]
        pieces = tuple(piece for box in flow(blocks, probe, size, font) for piece in box)
        return Frame(name=name, x=x, y=y, w=w, h=h, pieces=pieces, size=size, bold=bold, **style)  # type: ignore[arg-type]

    def title(self, text: str) -> Frame:
        return self.frame(
            "title", TITLE_BOX, text, TITLE_SIZES, bold=True, color=TITLE_COLOR, anchor="middle"
        )

    # -- the deck's own slides ----------------------------------------------------------------------

    def title_slide(self, doc: Document) -> SlidePlan:
        frames = [self.frame("title", (72.0, 110.0, 816.0, 180.0), doc.title, DECK_TITLE_SIZES, bold=True,
                             color=TITLE_COLOR, align="center", anchor="bottom")]  # fmt: skip
        if doc.subtitle:
            frames.append(self.frame("subtitle", (72.0, 310.0, 816.0, 130.0), doc.subtitle, SUBTITLE_SIZES,
                                     color=MUTED_COLOR, align="center"))  # fmt: skip
        return SlidePlan(layout="title", frames=tuple(frames), accent=True)

    def sources(self, doc: Document) -> list[SlidePlan]:
        blocks = []
        for i, source in enumerate(doc.sources, 1):
            named = source.url if source.title == source.url else f"{source.title} — {source.url}"
            blocks.append(Block(text=f"{i}. {named}", link=source.url))
        stream = _Stream(rects=(single_rect(),), blocks=blocks, sizes=SOURCE_SIZES, split=SOURCE_SPLIT_SIZE)
        return self.flowing(self.label("sources"), "sources", [stream], "")

    # -- sections ----------------------------------------------------------------------------------

    def section(self, section: Section) -> list[SlidePlan]:
        heading = drawable(section.heading) or self.label("overview")
        if not is_simple(section):
            return self.structured(heading, section)
        blocks = to_blocks(section.blocks)
        paragraphs = [block for block in blocks if not block.bullet]
        bullets = [block for block in blocks if block.bullet]
        layout = choose_layout(section, self.m)
        if layout == "title":
            centred = self.centred(heading, paragraphs, section.notes)
            if centred is not None:
                return [centred]
            layout = "bullets"
        if layout == "two-column":
            streams = [_Stream(rects=column_rects(), blocks=bullets, sizes=COLUMN_SIZES,
                               split=BODY_SPLIT_SIZE, names=("left", "right"))]  # fmt: skip
        elif layout == "bullets-details":
            left, right = details_rects()
            streams = [
                _Stream(rects=(left,), blocks=bullets, sizes=COLUMN_SIZES, split=BODY_SPLIT_SIZE,
                        names=("bullets",)),
                _Stream(rects=(right,), blocks=paragraphs, sizes=DETAIL_SIZES, split=DETAIL_SPLIT_SIZE,
                        names=("details",), fill=PANEL_COLOR),
            ]  # fmt: skip
        else:
            streams = [_Stream(rects=(single_rect(),), blocks=blocks, sizes=BODY_SIZES,
                               split=BODY_SPLIT_SIZE)]  # fmt: skip
        return self.flowing(heading, layout, streams, section.notes)

    def structured(self, heading: str, section: Section) -> list[SlidePlan]:
        """A section with tables, pictures, code, nested lists or text after a list: its blocks in
        order — text flowed over as many slides as it needs, each table and picture on a slide of its
        own (or under a short text), every slide after the first titled "… (cont.)"."""
        slides: list[SlidePlan] = []
        groups: list[list[Any]] = []
        for block in section.blocks:
            if is_text(block) and groups and is_text(groups[-1][0]):
                groups[-1].append(block)
            else:
                groups.append([block])
        pending: tuple[list[Frame], float] | None = None  # one short text slide a table may join
        for group in groups:
            title = heading if not slides and pending is None else heading + self.label("cont")
            if is_text(group[0]):
                if pending is not None:
                    slides.append(SlidePlan(layout="bullets", frames=tuple(pending[0])))
                joined = self.join_below(slides[-1], to_blocks(group)) if slides and pending is None else None
                if joined is not None:  # a short text under the table or picture before it
                    slides[-1] = joined
                    pending = None
                    continue
                stream = _Stream(rects=(single_rect(),), blocks=to_blocks(group), sizes=BODY_SIZES,
                                 split=BODY_SPLIT_SIZE)  # fmt: skip
                made = self.flowing(title, "bullets", [stream], "")
                pending = None
                if len(made) == 1:
                    pending = (list(made[0].frames), self.used_height(made[0]))
                    if fits_below(pending[1], single_rect()) is None:  # room for what follows, if smaller
                        pending = self.shrunk(made[0], stream.blocks) or pending
                else:
                    slides += made
                continue
            below = fits_below(pending[1], single_rect()) if pending is not None else None
            frames = pending[0] if below is not None and pending is not None else [self.title(title)]
            if pending is not None and below is None:
                slides.append(SlidePlan(layout="bullets", frames=tuple(pending[0])))
                frames = [self.title(heading + self.label("cont"))]
            pending = None
            slides += self.special(group[0], frames, below or single_rect(), heading)
        if pending is not None:
            slides.append(SlidePlan(layout="bullets", frames=tuple(pending[0])))
        if slides and section.notes:
            slides[0] = SlidePlan(layout=slides[0].layout, frames=slides[0].frames, tables=slides[0].tables,
                                  pictures=slides[0].pictures, notes=section.notes)  # fmt: skip
        return slides or [SlidePlan(layout="title", frames=(self.title(heading),), notes=section.notes)]

    def special(self, block: Any, frames: list[Frame], rect: Rect, heading: str) -> list[SlidePlan]:
        """A table's or a picture's slides; the first carries ``frames`` (its title, maybe a text)."""
        if isinstance(block, Table):
            parts = plan_table(block, rect, self.m)
            if len(parts) > 1 and rect != single_rect():  # a long table gets whole slides
                rest = self.special(block, [self.title(heading + self.label("cont"))], single_rect(), heading)
                return [SlidePlan(layout="bullets", frames=tuple(frames)), *rest]
            out = []
            for index, part in enumerate(parts):
                head = frames if index == 0 else [self.title(heading + self.label("cont"))]
                out.append(SlidePlan(layout="table", frames=tuple(head), tables=(part,)))
            return out
        if rect != single_rect() and rect[3] < MIN_PICTURE_SHARE * single_rect()[3]:  # too small a place
            rest = self.special(block, [self.title(heading + self.label("cont"))], single_rect(), heading)
            return [SlidePlan(layout="bullets", frames=tuple(frames)), *rest]
        picture = plan_picture(block, rect)
        if picture is None:  # no picture to draw: its alt text, as a line of text
            alt = Block(text=f"[{drawable(block.alt or block.src)}]", italic=True, color=MUTED_COLOR)
            stream = _Stream(rects=(rect,), blocks=[alt], sizes=BODY_SIZES, split=BODY_SPLIT_SIZE)
            made = self.flowing("", "bullets", [stream], "")
            return [SlidePlan(layout="bullets", frames=tuple(frames) + made[0].frames[1:])]
        extra = []
        if picture.caption and picture.caption_rect is not None:
            extra.append(self.frame("caption", picture.caption_rect, picture.caption, (CAPTION_SIZE, 12, 10),
                                    color=MUTED_COLOR, align="center"))  # fmt: skip
        return [SlidePlan(layout="picture", frames=tuple(frames + extra), pictures=(picture,))]

    def shrunk(self, slide: SlidePlan, blocks: list[Block]) -> tuple[list[Frame], float] | None:
        """The slide's text at the largest readable size that leaves room under it for a table or a
        picture, or None when even the smallest leaves none."""
        x, y, w, h = single_rect()
        box = Box(width=w - 2 * INSET, height=h - 2 * INSET, bullet_indent=BULLET_INDENT)
        for size in (size for size in BODY_SIZES if size >= BODY_SPLIT_SIZE):
            boxes = flow(blocks, box, size, self.m, self.fonts)
            if len(boxes) != 1:
                continue
            body = Frame(name="body", x=x, y=y, w=w, h=h, pieces=tuple(boxes[0]), size=size)
            frames = [frame for frame in slide.frames if frame.name != "body"] + [body]
            used = self.used_height(replace(slide, frames=tuple(frames)))
            if fits_below(used, single_rect()) is not None:
                return frames, used
        return None

    def join_below(self, slide: SlidePlan, blocks: list[Block]) -> SlidePlan | None:
        """``slide`` (a table's or a picture's) with ``blocks`` under its drawing, when they fit there
        whole at a body size; else None."""
        if not (slide.tables or slide.pictures):
            return None
        bottoms = [table.y + sum(table.heights) for table in slide.tables]
        bottoms += [
            p.caption_rect[1] + p.caption_rect[3] if p.caption_rect else p.y + p.h for p in slide.pictures
        ]
        top = max(bottoms) + COLUMN_GAP / 2
        x, _, w, _ = single_rect()
        rect = (x, top, w, BODY_BOTTOM - top)
        if rect[3] < MIN_SHARE_BELOW * single_rect()[3]:
            return None
        box = Box(width=w - 2 * INSET, height=rect[3] - 2 * INSET, bullet_indent=BULLET_INDENT)
        size = largest_fitting(blocks, box, BODY_SIZES, self.m, fonts=self.fonts)
        if size is None:
            return None
        pieces = tuple(flow(blocks, box, size, self.m, self.fonts)[0])
        body = Frame(name="body", x=rect[0], y=rect[1], w=rect[2], h=rect[3], pieces=pieces, size=size)
        return replace(slide, frames=(*slide.frames, body))

    def used_height(self, slide: SlidePlan) -> float:
        """How far down the body its text reaches, in points from the body's top."""
        bodies = [frame for frame in slide.frames if frame.name != "title"]
        if not bodies:
            return 0.0
        total = 2 * INSET + HEIGHT_SLACK_PT
        for frame in bodies:
            for piece in frame.pieces:
                block = piece.block or Block(text=piece.text)
                m = self.fonts["mono"] if block.mono else self.m
                size = frame.size * block.scale
                box = Box(width=frame.w - 2 * INSET, height=frame.h, bullet_indent=BULLET_INDENT)
                lines = len(block_lines(replace(block, text=piece.text), box, frame.size, m))
                total += (0.0 if block.tight else space_before(size)) + lines * line_pitch(size, m)
        return total

    def centred(self, heading: str, paragraphs: list[Block], notes: str) -> SlidePlan | None:
        frames = [self.frame("title", (72.0, 120.0, 816.0, 150.0), heading, CENTRED_HEADING_SIZES, bold=True,
                             color=TITLE_COLOR, align="center", anchor="bottom")]  # fmt: skip
        if paragraphs:
            rect = (96.0, 290.0, 768.0, 190.0)
            probe = Box(width=rect[2] - 2 * INSET, height=rect[3] - 2 * INSET)
            size = largest_fitting(paragraphs, probe, CENTRED_TEXT_SIZES, self.m, fonts=self.fonts)
            if size is None:
                return None
            pieces = tuple(flow(paragraphs, probe, size, self.m, self.fonts)[0])
            frames.append(Frame(name="text", x=rect[0], y=rect[1], w=rect[2], h=rect[3], pieces=pieces,
                                size=size, color=MUTED_COLOR, align="center"))  # fmt: skip
        return SlidePlan(layout="title", frames=tuple(frames), notes=notes)

    def flowing(self, heading: str, layout: Layout, streams: list[_Stream], notes: str) -> list[SlidePlan]:
        """Fill each stream's boxes at the largest size that keeps the section on one slide; else split
        every stream at its split size and give the section as many slides as its longest stream needs."""
        poured: list[tuple[_Stream, list[list[Piece]], float]] = []
        for stream in streams:
            rect = stream.rects[0]
            box = Box(width=rect[2] - 2 * INSET, height=rect[3] - 2 * INSET, bullet_indent=BULLET_INDENT)
            per_slide = len(stream.rects)
            size = largest_fitting(stream.blocks, box, stream.sizes, self.m, boxes=per_slide,
                                   fonts=self.fonts) or stream.split  # fmt: skip
            boxes = balanced(stream.blocks, box, size, self.m, self.fonts)
            if per_slide == 2 and len(boxes) == 2:
                boxes = _balanced(stream.blocks, box, size, self.m) or boxes
            poured.append((stream, boxes, size))
        count = max(-(-len(boxes) // len(stream.rects)) for stream, boxes, _ in poured)
        slides: list[SlidePlan] = []
        for index in range(count):
            frames = [self.title(heading if index == 0 else heading + self.label("cont"))]
            for stream, boxes, size in poured:
                for offset, ((x, y, w, h), name) in enumerate(zip(stream.rects, stream.names, strict=True)):
                    position = index * len(stream.rects) + offset
                    if position < len(boxes) and boxes[position]:
                        frames.append(Frame(name=name, x=x, y=y, w=w, h=h, pieces=tuple(boxes[position]),
                                            size=size, fill=stream.fill))  # fmt: skip
            slides.append(SlidePlan(layout=layout, frames=tuple(frames), notes=notes if index == 0 else ""))
        return slides


Rect = tuple[float, float, float, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stream:
    """Blocks poured through a slide's boxes of one kind (two for two columns), slide after slide."""

    rects: tuple[Rect, ...]
    blocks: list[Block]
    sizes: Sequence[float]
    split: float
    names: tuple[str, ...] = ("body",)
    fill: str | None = None


def single_rect() -> Rect:
    return (MARGIN_X, BODY_TOP, SLIDE_W - 2 * MARGIN_X, BODY_BOTTOM - BODY_TOP)


def column_rects() -> tuple[Rect, Rect]:
    width = (SLIDE_W - 2 * MARGIN_X - COLUMN_GAP) / 2
    height = BODY_BOTTOM - BODY_TOP
    return (MARGIN_X, BODY_TOP, width, height), (MARGIN_X + width + COLUMN_GAP, BODY_TOP, width, height)


def details_rects() -> tuple[Rect, Rect]:
    left = 400.0
    height = BODY_BOTTOM - BODY_TOP
    right_x = MARGIN_X + left + COLUMN_GAP
    return (MARGIN_X, BODY_TOP, left, height), (right_x, BODY_TOP, SLIDE_W - MARGIN_X - right_x, height)


def _balanced(blocks: list[Block], box: Box, size: float, m: Measurer) -> list[list[Piece]] | None:
    """Two columns of one slide with about half the blocks each (a full left column over a short right
    one reads badly), when both halves still fit their boxes whole."""
    half = (len(blocks) + 1) // 2
    left, right = flow(blocks[:half], box, size, m), flow(blocks[half:], box, size, m)
    if len(left) == 1 and len(right) == 1:
        return [left[0], right[0]]
    return None


def is_simple(section: Section) -> bool:
    """Paragraphs and at most one flat bulleted list of one-paragraph items: the shape the density
    layouts (two columns, bullets beside details, centred) are made for. One column keeps their order;
    bullets beside details put the list on the left, read first."""
    blocks = [block for block in section.blocks if not isinstance(block, Paragraph)]
    if not blocks:
        return True
    if len(blocks) > 1 or not isinstance(blocks[0], ListBlock) or blocks[0].ordered:
        return False
    return all(len(item.blocks) == 1 and isinstance(item.blocks[0], Paragraph) and item.checked is None
               for item in blocks[0].items)  # fmt: skip


def choose_layout(section: Section, m: Measurer) -> Layout:
    """The layout a section's density calls for (see the module docstring)."""
    bullet_em = [m.width_em(text) for text in section.bullets]
    paragraph_em = sum(m.width_em(text) for text in section.paragraphs)
    if not section.bullets and paragraph_em <= CENTRED_MAX_EM:
        return "title"
    many_short = len(bullet_em) >= TWO_COLUMN_MIN_BULLETS and max(bullet_em) <= SHORT_BULLET_MAX_EM
    if many_short and not section.paragraphs:
        return "two-column"
    if 1 <= len(bullet_em) <= DETAILS_MAX_BULLETS and paragraph_em >= DETAILS_MIN_PARAGRAPH_EM:
        return "bullets-details"
    return "bullets"


def plan_deck(doc: Document) -> list[SlidePlan]:
    """Every slide of the deck, measured and split; nothing is drawn yet."""
    planner = _Planner(lang=doc.lang)
    slides = [planner.title_slide(doc)]
    for section in doc.sections:
        slides += planner.section(section)
    if doc.sources:
        slides += planner.sources(doc)
    return slides
