"""The document model at the trust edge, and reading Markdown."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.artifacts.samples import EN, ZH
from tether.artifacts import Document, DocumentError, from_markdown, make_document
from tether.artifacts.document import (
    MAX_BULLETS,
    MAX_ITEM_CHARS,
    MAX_MARKDOWN_CHARS,
    MAX_SECTIONS,
    MAX_TITLE_CHARS,
    Table,
    detect_language,
    plain,
)
from tether.artifacts.markdown import to_markdown


def test_markdown_becomes_title_sections_bullets_sources_and_notes() -> None:
    doc = from_markdown(ZH)
    assert doc.title == "城市更新中的社区参与"
    assert doc.subtitle == "2024 年度研究报告"
    assert doc.language == "zh"
    headings = [section.heading for section in doc.sections]
    assert headings == ["背景", "主要发现", "案例分析", "详细指标"]
    assert doc.sections[1].bullets[0] == "居民参与度与项目满意度显著正相关"
    cases = doc.sections[2]
    assert cases.bullets == ["上海杨浦滨江", "北京大栅栏"]
    assert cases.paragraphs[0].startswith("杨浦滨江的更新")
    assert cases.notes == "这一页讲两个案例，控制在两分钟内。"
    assert [source.url for source in doc.sources] == [
        "https://www.mohurd.gov.cn/xinwen/gzdt/202107/20210709_250802.html",
        "https://doi.org/10.1080/07352166.2020.1234567",
    ]
    assert doc.sources[0].title == "住房和城乡建设部：城市更新行动"


def test_english_markdown_with_a_bare_url_source() -> None:
    doc = from_markdown(EN)
    assert doc.language == "en"
    assert doc.sections[2].notes == "two cases, two minutes."
    assert doc.sources[1].url.startswith("https://example.org/a/very/long/path")
    assert doc.sources[1].title == doc.sources[1].url


def test_links_in_the_text_become_sources_once() -> None:
    doc = from_markdown(
        "# T\n\nSee [the report](https://a.example/r) and [again](https://a.example/r).\n\n"
        "## 参考\n- [报告](https://b.example/x)\n"
    )
    assert [(s.title, s.url) for s in doc.sources] == [("报告", "https://b.example/x"),
                                                        ("the report", "https://a.example/r")]  # fmt: skip


def test_a_given_title_wins_and_a_matching_heading_is_not_repeated() -> None:
    doc = from_markdown("# Report\n\nBody text.", title="Report")
    assert (
        doc.title == "Report"
        and doc.sections[0].heading == ""
        and doc.sections[0].paragraphs == ["Body text."]
    )
    other = from_markdown("# Chapter one\n\nBody.", title="The book")
    assert other.title == "The book" and other.sections[0].heading == "Chapter one"


def test_script_links_never_become_sources() -> None:
    doc = from_markdown("# T\n\n[click](javascript:alert(1)) and <script>x</script> text")
    assert doc.sources == []
    with pytest.raises(DocumentError, match="http:// or https://"):
        make_document(title="T", sources=[{"title": "x", "url": "javascript:alert(1)"}])


def test_tables_stay_tables_with_their_rows_columns_and_alignment() -> None:
    doc = from_markdown("# T\n\n## 数据\n\n| 城市 | 人口 |\n|---|--:|\n| 上海 | **2487** 万 |\n| 北京 |\n")
    (table,) = doc.sections[0].blocks
    assert isinstance(table, Table)
    assert [plain(cell) for cell in table.header] == ["城市", "人口"]
    assert [[plain(cell) for cell in row] for row in table.rows] == [["上海", "2487 万"], ["北京", ""]]
    assert table.align == ["", "right"] and table.rows[0][1][0].bold


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"title": ""}, "title: must be 1 to 200 characters (this one has 0)"),
        ({"title": "x" * (MAX_TITLE_CHARS + 1)}, f"1 to {MAX_TITLE_CHARS} characters"),
        ({"title": "T", "sections": [{"heading": "h", "bullets": ["b"] * (MAX_BULLETS + 1)}]},
         f"sections.0.blocks.0.list.items: List should have at most {MAX_BULLETS} items"),
        ({"title": "T", "sections": [{"bullets": [" \t "]}]},
         "sections.0.blocks.0.list.items.0.blocks.0.paragraph.spans: Value should have at least 1 item"),
        ({"title": "T", "sections": [{"paragraphs": ["p" * (MAX_ITEM_CHARS + 1)]}]},
         f"1 to {MAX_ITEM_CHARS} characters (this one has {MAX_ITEM_CHARS + 1})"),
        ({"title": "T", "sections": [{"heading": "h"}] * (MAX_SECTIONS + 1)},
         f"at most {MAX_SECTIONS} items"),
        ({"title": "T", "sections": [{}]}, "a section needs a heading or some content"),
        ({"title": "T", "language": "fr"}, "language: Input should be 'zh' or 'en'"),
        ({"title": "T", "colour": "red"}, "colour: Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_bad_documents_are_refused_with_what_is_allowed(fields: dict[str, object], expected: str) -> None:
    with pytest.raises(DocumentError) as caught:
        make_document(**fields)
    assert expected in caught.value.message


def test_markdown_that_is_too_long_or_empty_is_refused() -> None:
    with pytest.raises(DocumentError, match=f"the limit is {MAX_MARKDOWN_CHARS}"):
        from_markdown("x" * (MAX_MARKDOWN_CHARS + 1), title="T")
    with pytest.raises(DocumentError, match="no title"):
        from_markdown("just text")
    assert from_markdown("   \n\n", title="T").sections == []  # a title page alone is a document


def test_text_is_cleaned_of_what_xml_cannot_carry() -> None:
    doc = make_document(title="A\x00B\ud800 C\n\tD", sections=[{"heading": "h\x0b", "bullets": ["x\x1fy"]}])
    assert doc.title == "AB C D"
    assert doc.sections[0].heading == "h" and doc.sections[0].bullets == ["xy"]


@pytest.mark.parametrize(
    ("text", "language"),
    [("城市更新中的社区参与", "zh"), ("Urban renewal and 社区 participation in cities", "en"),
     ("报告：OECD 的 GDP 数据与城市更新", "zh"), ("", "en")],
)  # fmt: skip
def test_language_is_detected_from_the_text(text: str, language: str) -> None:
    assert detect_language(text) == language


TEXT = st.text(
    alphabet=st.sampled_from(list("城市更新社区参与，。：“”（）abcXYZ 0129-_*#[]<>&!|`~+.=\\/")),
    min_size=1, max_size=40,
).map(lambda s: " ".join(s.split())).filter(bool)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    title=TEXT,
    sections=st.lists(
        st.fixed_dictionaries({"heading": TEXT, "paragraphs": st.lists(TEXT, max_size=3),
                               "bullets": st.lists(TEXT, max_size=4)}),
        max_size=4,
    ),
)  # fmt: skip
def test_markdown_round_trips_whatever_the_text_holds(title: str, sections: list[dict[str, object]]) -> None:
    doc = make_document(title=title, sections=sections, language="zh")
    again = from_markdown(to_markdown(doc), language="zh")
    assert again == doc


def test_the_model_is_frozen_and_language_always_set() -> None:
    doc = make_document(title="Hello world")
    assert isinstance(doc, Document) and doc.lang == "en"
    with pytest.raises(Exception, match="frozen"):
        doc.title = "x"  # type: ignore[misc]


def test_long_paragraphs_raw_html_and_too_many_headings_are_kept_not_refused() -> None:
    """What a model writes in the wild: a 5,000-character Chinese paragraph, an HTML block, 100 headings."""
    from tether.artifacts.document import MAX_ITEM_CHARS, MAX_SECTIONS

    sentence = "太阳能电池利用光伏效应把阳光直接转换成电能。"
    times = MAX_ITEM_CHARS * 2 // len(sentence) + 10
    doc = from_markdown("# T\n\n## A\n\n" + sentence * times)
    pieces = doc.sections[0].paragraphs
    assert len(pieces) >= 3 and all(len(p) <= MAX_ITEM_CHARS and p.endswith("。") for p in pieces)
    assert "".join(pieces) == sentence * times  # nothing lost
    doc = from_markdown("## A\n<div>\nWhole <b>block</b> &amp; more\n</div>\n\nafter", title="x")
    assert doc.sections[0].paragraphs == ["Whole block & more", "after"]
    doc = from_markdown("# T\n" + "".join(f"## H{i}\n\n- b{i}\n\n" for i in range(MAX_SECTIONS + 20)))
    last = doc.sections[-1].blocks
    assert len(doc.sections) == MAX_SECTIONS and f"H{MAX_SECTIONS + 19}" in [
        b.text for b in last if b.kind == "heading"
    ]
