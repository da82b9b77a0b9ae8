"""Slide decks: the density-adaptive layouts, continuation slides, and text that never overflows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests.artifacts.deckcheck import body_text, overflows, read_frames
from tests.artifacts.samples import EN, ZH
from tether.artifacts import from_markdown, make_document
from tether.artifacts.document import MAX_HEADING_CHARS, MAX_ITEM_CHARS, MAX_SUBTITLE_CHARS, MAX_TITLE_CHARS
from tether.artifacts.pptx import plan_deck
from tether.artifacts.pptxdraw import render, write_pptx

SAMPLES = {"zh": ZH, "en": EN}


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_sample_deck_layouts_fit_and_keep_every_bullet(lang: str, tmp_path: Path) -> None:
    from pptx import Presentation

    doc = from_markdown(SAMPLES[lang])
    path = tmp_path / "deck.pptx"
    slides = write_pptx(doc, path)
    deck = Presentation(str(path))
    assert len(deck.slides) == slides
    assert (deck.slide_width, deck.slide_height) == (12192000, 6858000)  # 16:9
    layouts = [plan.layout for plan in plan_deck(doc)]
    assert layouts[0] == "title" and layouts[2:4] == ["two-column", "bullets-details"]
    assert layouts[1] == ("title" if lang == "zh" else "bullets")  # a short paragraph is centred
    assert layouts[-1] == "sources"
    assert layouts.count("bullets") >= 2  # the dense section was split
    cont = "（续）" if lang == "zh" else " (cont.)"
    titles = [f.text for f in read_frames(path) if f.name == "title"]
    assert doc.sections[3].heading + cont in titles
    frames = read_frames(path)
    assert [problem for frame in frames for problem in overflows(frame)] == []
    text = body_text(frames)
    for section in doc.sections:
        for item in (*section.paragraphs, *section.bullets):
            assert "".join(item.split()) in text
    for source in doc.sources:
        assert source.url in text
    with_notes = [slide for slide in deck.slides if slide.has_notes_slide]
    notes = [cast(Any, slide.notes_slide.notes_text_frame).text for slide in with_notes]
    assert doc.sections[2].notes in notes


def test_every_run_is_set_in_the_cjk_font_with_its_language(tmp_path: Path) -> None:
    path = tmp_path / "deck.pptx"
    write_pptx(from_markdown(ZH), path)
    import zipfile

    with zipfile.ZipFile(path) as archive:
        xml = archive.read("ppt/slides/slide2.xml").decode()
    assert '<a:ea typeface="Noto Sans CJK SC"/>' in xml and 'lang="zh-CN"' in xml
    assert "<a:noAutofit/>" in xml  # what was measured is what is drawn


def test_a_bullet_longer_than_a_slide_splits_between_lines_and_loses_nothing() -> None:
    giant = "这是一个非常长的要点，" * (MAX_ITEM_CHARS // 11)
    doc = make_document(title="长", sections=[{"heading": "一节", "bullets": [giant, "短的"]}])
    deck = render(plan_deck(doc), "zh")
    frames = read_frames(deck)
    assert len({f.slide for f in frames}) >= 3
    assert [p for f in frames for p in overflows(f)] == []
    assert "".join(giant.split()) + "短的" in body_text(frames)


def test_longest_titles_headings_and_subtitles_still_fit() -> None:
    doc = make_document(
        title="标" * MAX_TITLE_CHARS, subtitle="W" * MAX_SUBTITLE_CHARS,
        sections=[{"heading": "题" * MAX_HEADING_CHARS, "bullets": ["x"]},
                  {"heading": "Wide " * (MAX_HEADING_CHARS // 5)}],
    )  # fmt: skip
    frames = read_frames(render(plan_deck(doc), "zh"))
    assert [p for f in frames for p in overflows(f)] == []


# -- hypothesis: random mixes of long and short, CJK and Latin ------------------------------------------

HAN = "城市更新社区参与居民项目满意度早期介入数字化工具门槛老年群体，。、：（）“”"
CJK = st.text(alphabet=st.sampled_from(list(HAN)), min_size=1, max_size=30)
WORD = st.one_of(
    st.sampled_from(
        ["the", "renewal", "of", "community", "participation", "GDP", "2024", "OECD", "and", "Wm"]
    ),
    st.text(
        alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyzWMQ0123456789-/.")), min_size=1, max_size=70
    ),
)
LATIN = st.lists(WORD, min_size=1, max_size=25).map(" ".join)
MIXED = st.lists(st.one_of(CJK, WORD), min_size=1, max_size=20).map(lambda parts: " ".join(parts))
SHORT = st.one_of(CJK.map(lambda s: s[:8]), WORD)
LONG = st.lists(st.one_of(CJK, LATIN, MIXED), min_size=1, max_size=12).map(" ".join)
ITEM = st.one_of(SHORT, LONG, MIXED).map(lambda s: " ".join(s.split())[:MAX_ITEM_CHARS]).filter(bool)
SECTION = st.fixed_dictionaries({
    "heading": st.one_of(SHORT, MIXED).map(lambda s: " ".join(s.split())[:MAX_HEADING_CHARS]),
    "paragraphs": st.lists(ITEM, max_size=3),
    "bullets": st.lists(ITEM, max_size=24),
}).filter(lambda s: bool(s["heading"] or s["paragraphs"] or s["bullets"]))  # fmt: skip


def find_split(text: str, frames: list[str], after: tuple[int, int]) -> tuple[int, int] | None:
    """Where ``text`` ends in the frames' texts, read from ``after`` (frame, offset) on: whole in one frame,
    or its start ending one frame and the rest starting a later one (a bullet continued on the next slide,
    with that slide's other boxes in between). None when it is not there."""
    first, offset = after
    for index in range(first, len(frames)):
        frame = frames[index]
        start = frame.find(text[:1], offset if index == first else 0)
        while start != -1:
            taken = min(len(text), len(frame) - start)
            if frame[start : start + taken] == text[:taken]:
                if taken == len(text):
                    return index, start + taken
                if start + taken == len(frame):  # the frame ends mid-item: the rest starts a later frame
                    rest = find_rest(text[taken:], frames, index + 1)
                    if rest is not None:
                        return rest
            start = frame.find(text[:1], start + 1)
    return None


def find_rest(rest: str, frames: list[str], first: int) -> tuple[int, int] | None:
    for index in range(first, len(frames)):
        frame = frames[index]
        taken = min(len(rest), len(frame))
        if frame[:taken] == rest[:taken]:
            if taken == len(rest):
                return index, taken
            deeper = find_rest(rest[taken:], frames, index + 1)
            if deeper is not None:
                return deeper
    return None


@pytest.mark.timeout(600)  # 40 decks rendered and read back: minutes on a loaded 2-core machine
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # No explain phase: its line tracer makes each deck many times slower (it hit the 60 s timeout).
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
@given(title=ITEM.map(lambda s: s[:MAX_TITLE_CHARS]), sections=st.lists(SECTION, min_size=1, max_size=3))
@example(  # a line that fills a box to its last point by tether's measure, and a hair more shaped
    title="“",
    sections=[{"heading": "。民项体，具民意", "bullets": [], "paragraphs": [
        "“ “ 槛槛工） renewal 更具）： the the community GDP 18gt0M4 GDP 2024 2024 2024 20n hz0 p1c "
        "0MM-bgimvwz “““ 00000/rwg/"
    ]}],
)  # fmt: skip
def test_random_sections_never_overflow_and_never_lose_text(
    title: str, sections: list[dict[str, object]]
) -> None:
    doc = make_document(title=title, sections=sections)
    frames = read_frames(render(plan_deck(doc), doc.lang))
    assert [problem for frame in frames for problem in overflows(frame)] == []
    texts = ["".join(f.text.split()) for f in frames if f.name != "title"]
    for section in doc.sections:
        for kind in (section.paragraphs, section.bullets):  # a layout may put details beside the bullets
            position = (0, 0)
            for item in kind:
                squashed = "".join(item.split())
                # In order where the text tells (random repetitive text can match a later item's middle).
                found = find_split(squashed, texts, position) or find_split(squashed, texts, (0, 0))
                if found is None:  # every item whole, even continued on the next slide
                    pytest.fail(f"{item!r} is lost")
                position = found
    for frame in frames:
        assert (
            0 <= frame.x
            and frame.x + frame.w <= 960 + 0.01
            and 0 <= frame.y
            and frame.y + frame.h <= 540 + 0.01
        )
