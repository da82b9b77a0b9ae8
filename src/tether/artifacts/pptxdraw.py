"""Drawing a planned deck with python-pptx: text boxes, table shapes and pictures, exactly as
``pptx.plan_deck`` measured them.

Paragraphs are written as DrawingML in one go (python-pptx's property setters walk the tree for every
attribute and made drawing cost three times the measuring). Every run names its font for Latin, East
Asian and complex scripts and its language, so PowerPoint and LibreOffice pick the face that was
measured; code runs use the monospace face and keep their spaces.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from tether.artifacts.document import Document, Language
from tether.artifacts.fonts import FAMILY, MONO_FAMILY, measurer
from tether.artifacts.pptx import (
    ACCENT_COLOR,
    ACCENT_RULE,
    BULLET_INDENT,
    EMU_PER_PT,
    INSET,
    SLIDE_H,
    SLIDE_W,
    Frame,
    SlidePlan,
    plan_deck,
)
from tether.artifacts.slideparts import CELL_MARGIN_X, CELL_MARGIN_Y, PictureFrame, TableFrame
from tether.artifacts.textfit import Block, Run, line_pitch, space_before

if TYPE_CHECKING:
    from pptx.presentation import Presentation
    from pptx.util import Emu

_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_HYPERLINK = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/hyperlink"
HEADER_TEXT = "FFFFFF"
LINK_COLOR = "1D4ED8"


def write_pptx(doc: Document, path: str | os.PathLike[str]) -> int:
    """Write the deck to ``path``; returns the number of slides."""
    plans = plan_deck(doc)
    render(plans, doc.lang).save(os.fspath(path))
    return len(plans)


def render(plans: Sequence[SlidePlan], lang: Language) -> Presentation:
    """The deck as a python-pptx presentation (``write_pptx`` saves it)."""
    from pptx import Presentation as new_presentation
    from pptx.dml.color import RGBColor
    from pptx.enum.shapes import MSO_SHAPE
    from pptx.util import Emu

    deck = new_presentation()
    deck.slide_width, deck.slide_height = Emu(int(SLIDE_W * EMU_PER_PT)), Emu(int(SLIDE_H * EMU_PER_PT))
    blank = deck.slide_layouts[6]
    for plan in plans:
        slide = deck.slides.add_slide(blank)
        for frame in plan.frames:
            _draw(slide, frame, lang)
        for table in plan.tables:
            _table(slide, table, lang)
        for picture in plan.pictures:
            _picture(slide, picture)
        if plan.accent:
            rule = slide.shapes.add_shape(MSO_SHAPE.RECTANGLE, *map(_emu, ACCENT_RULE))
            rule.fill.solid()
            rule.fill.fore_color.rgb = RGBColor.from_string(ACCENT_COLOR)
            rule.line.fill.background()
        if plan.notes:
            slide.notes_slide.notes_text_frame.text = plan.notes  # type: ignore[union-attr]
    return deck


def _emu(points: float) -> Emu:
    from pptx.util import Emu

    return Emu(round(points * EMU_PER_PT))


def _fonts(mono: bool) -> str:
    family = MONO_FAMILY if mono else FAMILY
    return f'<a:latin typeface="{family}"/><a:ea typeface="{family}"/><a:cs typeface="{family}"/>'


def runs_xml(
    slide: Any,
    text: str,
    start: int,
    runs: Sequence[Run],
    *,
    size: float,
    bold: bool,
    italic: bool,
    color: str,
    language: str,
    mono: bool = False,
    link: str | None = None,
) -> str:
    """``text`` (which begins at ``start`` of its block's text) as ``<a:r>`` runs styled by ``runs``."""
    end = start + len(text)
    cuts = sorted({start, end, *(p for r in runs for p in (r.start, r.end) if start < p < end)})
    out = []
    for left, right in itertools.pairwise(cuts):
        run = next((r for r in runs if r.start <= left and right <= r.end), None)
        r_bold = bold or (run is not None and run.bold)
        r_italic = italic or (run is not None and run.italic)
        r_mono = mono or (run is not None and run.code)
        r_link = (run.link if run is not None else None) or link
        strike = ' strike="sngStrike"' if run is not None and run.strike else ""
        hyperlink = ""
        r_color = color
        if r_link:
            hyperlink = f'<a:hlinkClick r:id="{slide.part.relate_to(r_link, _HYPERLINK, is_external=True)}"/>'
            r_color = LINK_COLOR if run is not None and run.link else color
        out.append(
            f'<a:r><a:rPr lang="{language}" sz="{round(size * 100)}" b="{int(r_bold)}" i="{int(r_italic)}"'
            f'{strike} dirty="0"><a:solidFill><a:srgbClr val="{r_color}"/></a:solidFill>{_fonts(r_mono)}'
            f"{hyperlink}</a:rPr><a:t>{escape(text[left - start : right - start])}</a:t></a:r>"
        )
    empty = (
        f'<a:r><a:rPr lang="{language}" sz="{round(size * 100)}" dirty="0">{_fonts(mono)}</a:rPr><a:t/></a:r>'
    )
    return "".join(out) or empty


def _bullet_xml(block: Block, continued: bool) -> str:
    if not block.bullet or continued or (block.number is None and not block.marker):
        return "<a:buNone/>"
    if block.number is not None:
        return f'<a:buFont typeface="{FAMILY}"/><a:buAutoNum type="arabicPeriod" startAt="{block.number}"/>'
    return f'<a:buFont typeface="{FAMILY}"/><a:buChar char="{block.marker}"/>'


def _draw(slide: Any, frame: Frame, lang: Language) -> None:
    """One text box, every paragraph styled by its block: indent, marker or number, face and size."""
    from pptx.dml.color import RGBColor
    from pptx.enum.text import MSO_ANCHOR, MSO_AUTO_SIZE
    from pptx.oxml import parse_xml
    from pptx.util import Pt

    shape = slide.shapes.add_textbox(_emu(frame.x), _emu(frame.y), _emu(frame.w), _emu(frame.h))
    shape.name = frame.name
    if frame.fill:
        shape.fill.solid()
        shape.fill.fore_color.rgb = RGBColor.from_string(frame.fill)
    text_frame = shape.text_frame
    text_frame.word_wrap = True
    text_frame.auto_size = MSO_AUTO_SIZE.NONE
    text_frame.margin_left = text_frame.margin_right = Pt(INSET)
    text_frame.margin_top = text_frame.margin_bottom = Pt(INSET)
    anchors = {"top": MSO_ANCHOR.TOP, "middle": MSO_ANCHOR.MIDDLE, "bottom": MSO_ANCHOR.BOTTOM}
    text_frame.vertical_anchor = anchors[frame.anchor]
    language = "zh-CN" if lang == "zh" else "en-US"
    align = "ctr" if frame.align == "center" else "l"
    paragraphs = []
    for piece in frame.pieces:
        block = piece.block or Block(text=piece.text, bullet=piece.bullet, link=piece.link)
        size = frame.size * block.scale
        m = measurer("mono" if block.mono else "bold" if frame.bold else "regular")
        pitch = round(line_pitch(size, m) * 100)
        before = 0 if block.tight else round(space_before(size) * 100)
        level_indent = BULLET_INDENT * (block.level + (1 if block.bullet and not block.level else 0))
        margin = f' lvl="{min(block.level - 1, 8)}"' if block.bullet and block.level > 0 else ""
        if level_indent:
            hanging = BULLET_INDENT if block.bullet and not piece.continued else 0.0
            margin += f' marL="{_emu(level_indent)}" indent="{-_emu(hanging) if hanging else 0}"'
        runs = runs_xml(
            slide,
            piece.text,
            piece.start,
            block.runs,
            size=size,
            bold=frame.bold or block.bold,
            italic=block.italic,
            color=block.color or frame.color,
            language=language,
            mono=block.mono,
            link=block.link,
        )
        paragraphs.append(
            f'<a:p><a:pPr algn="{align}"{margin}><a:lnSpc><a:spcPts val="{pitch}"/></a:lnSpc>'
            f'<a:spcBef><a:spcPts val="{before}"/></a:spcBef><a:spcAft><a:spcPts val="0"/></a:spcAft>'
            f"{_bullet_xml(block, piece.continued)}</a:pPr>{runs}</a:p>"
        )
    _replace_paragraphs(text_frame._txBody, paragraphs, parse_xml)


def _replace_paragraphs(tx_body: Any, paragraphs: list[str], parse_xml: Any) -> None:
    body = parse_xml(f'<a:txBody xmlns:a="{_A}" xmlns:r="{_R}">{"".join(paragraphs)}</a:txBody>')
    for old in tx_body.findall(f"{{{_A}}}p"):
        tx_body.remove(old)
    for paragraph in list(body):
        tx_body.append(paragraph)


def _table(slide: Any, table: TableFrame, lang: Language) -> None:
    """A real table shape: the header row (bold, on the theme's header fill) and the rows, each
    column as wide and each row as tall as planned."""
    from pptx.oxml import parse_xml
    from pptx.util import Pt

    rows, cols = 1 + len(table.rows), len(table.widths)
    shape = slide.shapes.add_table(
        rows, cols, _emu(table.x), _emu(table.y), _emu(sum(table.widths)), _emu(sum(table.heights))
    )
    shape.name = "table"
    grid = shape.table
    for index, width in enumerate(table.widths):
        grid.columns[index].width = _emu(width)
    language = "zh-CN" if lang == "zh" else "en-US"
    algn = {"center": "ctr", "right": "r"}
    m = measurer("regular")
    pitch = round(line_pitch(table.size, m) * 100)
    for r, (height, cells) in enumerate(zip(table.heights, (table.header, *table.rows), strict=True)):
        grid.rows[r].height = _emu(height)
        for c, cell in enumerate(cells):
            target = grid.cell(r, c)
            target.margin_left = target.margin_right = Pt(CELL_MARGIN_X)
            target.margin_top = target.margin_bottom = Pt(CELL_MARGIN_Y)
            color = HEADER_TEXT if r == 0 else "1F2937"
            runs = runs_xml(
                slide,
                cell.text,
                0,
                cell.runs,
                size=table.size,
                bold=r == 0,
                italic=False,
                color=color,
                language=language,
            )
            align = algn.get(table.align[c] if c < len(table.align) else "", "l")
            paragraph = (
                f'<a:p><a:pPr algn="{align}"><a:lnSpc><a:spcPts val="{pitch}"/></a:lnSpc></a:pPr>{runs}</a:p>'
            )
            _replace_paragraphs(target.text_frame._txBody, [paragraph], parse_xml)


def _picture(slide: Any, picture: PictureFrame) -> None:
    shape = slide.shapes.add_picture(
        picture.path, _emu(picture.x), _emu(picture.y), _emu(picture.w), _emu(picture.h)
    )
    shape.name = "picture"
    if picture.caption:
        shape._element.nvPicPr.cNvPr.set("descr", picture.caption)
