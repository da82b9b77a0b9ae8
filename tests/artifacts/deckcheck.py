"""Reading a written deck back and checking it: every text frame's text, laid out with the font's real
metrics at the size, pitch and indent the file declares, must fit the frame's box.

The measurement here is independent of the planner's: each laid-out line is measured whole with
Pillow's complex-text layout (HarfBuzz through raqm, kerning included) rather than summed per
character, and against the box's full width (the planner keeps a safety margin).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tether.artifacts.fonts import find_font, measurer
from tether.artifacts.textfit import AUTOSPACE_EM, WIDTH_SAFETY, is_cjk, wrap

EMU_PER_PT = 12700
TOLERANCE_PT = 0.01


@dataclass(frozen=True, slots=True)
class Para:
    text: str
    size: float
    pitch: float
    before: float
    margin_left: float
    bold: bool


@dataclass(frozen=True, slots=True)
class FrameInfo:
    slide: int
    name: str
    x: float
    y: float
    w: float
    h: float
    inset_l: float
    inset_r: float
    inset_t: float
    inset_b: float
    paragraphs: tuple[Para, ...]

    @property
    def text(self) -> str:
        return "\n".join(p.text for p in self.paragraphs)


def _pt(emu: Any) -> float:
    return int(emu) / EMU_PER_PT


def read_frames(path: Path | Any) -> list[FrameInfo]:
    from pptx import Presentation
    from pptx.oxml.ns import qn

    deck = Presentation(str(path)) if isinstance(path, Path) else path
    frames = []
    for number, slide in enumerate(deck.slides, 1):
        for shape in slide.shapes:
            if not shape.has_text_frame:
                continue
            tf = cast(Any, shape).text_frame
            paras = []
            for paragraph in tf.paragraphs:
                runs = paragraph.runs
                if not runs:
                    continue
                p_pr = paragraph._p.pPr
                spacing = p_pr.find(qn("a:lnSpc")).find(qn("a:spcPts"))
                before = p_pr.find(qn("a:spcBef")).find(qn("a:spcPts"))
                paras.append(Para(
                    text="".join(run.text for run in runs),
                    size=runs[0].font.size.pt,
                    pitch=int(spacing.get("val")) / 100,
                    before=int(before.get("val")) / 100,
                    margin_left=_pt(p_pr.get("marL", "0")),
                    bold=bool(runs[0].font.bold),
                ))  # fmt: skip
            if not paras:  # a shape that shows no text (the accent rule)
                continue
            frames.append(FrameInfo(
                slide=number, name=shape.name, x=_pt(shape.left), y=_pt(shape.top), w=_pt(shape.width),
                h=_pt(shape.height), inset_l=_pt(tf.margin_left), inset_r=_pt(tf.margin_right),
                inset_t=_pt(tf.margin_top), inset_b=_pt(tf.margin_bottom), paragraphs=tuple(paras),
            ))  # fmt: skip
    return frames


@functools.cache
def _face(bold: bool, size: float) -> Any:
    from PIL import ImageFont

    font = find_font("bold" if bold else "regular")
    return ImageFont.truetype(str(font.path), 1000, index=font.index, layout_engine=ImageFont.Layout.RAQM)


def line_width_pt(line: str, size: float, bold: bool) -> float:
    face = _face(bold, 1000)
    width = face.getlength(line) / 1000
    width += AUTOSPACE_EM * sum(
        1 for a, b in itertools.pairwise(line)
        if not a.isspace() and not b.isspace() and is_cjk(a) != is_cjk(b)
    )  # fmt: skip
    return width * size


def overflows(frame: FrameInfo) -> list[str]:
    """What does not fit in ``frame``: lines wider than its box, text taller than it."""
    problems = []
    inner_w = frame.w - frame.inset_l - frame.inset_r
    inner_h = frame.h - frame.inset_t - frame.inset_b
    height = 0.0
    for para in frame.paragraphs:
        width = inner_w - para.margin_left
        m = measurer("bold" if para.bold else "regular")
        # The lines as tether planned them (its own measure, WIDTH_SAFETY of the box), each judged by a
        # renderer's measure (shaped, kerned) against the whole box: the safety margin must hold. A
        # re-wrap at the full width would judge lines tether never lays out (860.0 pt in 859.2).
        spans = wrap(para.text, width * WIDTH_SAFETY, para.size, m)
        for start, end in spans:
            line = para.text[start:end]
            measured = line_width_pt(line, para.size, para.bold)
            if measured > width + TOLERANCE_PT and len(line) > 1:
                problems.append(f"slide {frame.slide} {frame.name}: line {line!r} is {measured:.1f} pt "
                                f"wide in a {width:.1f} pt box")  # fmt: skip
        assert para.pitch >= para.size * m.line_height_em, "line pitch below the font's own height"
        height += para.before + len(spans) * para.pitch
    if height > inner_h + TOLERANCE_PT:
        problems.append(
            f"slide {frame.slide} {frame.name}: text is {height:.1f} pt tall in a {inner_h:.1f} pt box"
        )
    return problems


def body_text(frames: list[FrameInfo]) -> str:
    """All text outside the titles, in reading order, without whitespace."""
    return "".join("".join(f.text.split()) for f in frames if f.name != "title")
