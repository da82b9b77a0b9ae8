"""The research overview says what the sources say, cited; a folder's deck is titled by its notes."""

from __future__ import annotations

from tether.models.offline_digest import overview, title_of_notes


def test_the_overview_never_runs_the_page_titles_together_and_cites_each_point() -> None:
    report, batteries = "Solar power: a one-page report", "Batteries at home"
    sources = [
        (report, [report, "Panels pay back their cost in six to nine years."]),
        (batteries, [batteries, "A battery moves solar power from noon to the evening peak."]),
        ("The grid", ["The grid", "Solar power peaks at noon while demand peaks in the evening."]),
    ]
    points = overview(sources, "solar power")
    assert points == [
        "Panels pay back their cost in six to nine years. [1]",
        "A battery moves solar power from noon to the evening peak. [2]",
        "Solar power peaks at noon while demand peaks in the evening. [3]",
    ]


def test_the_overview_prefers_what_several_sources_say_and_keeps_source_order() -> None:
    sources = [
        ("甲", ["公司总部设在上海浦东新区。", "光伏组件的价格十年下降了约九成。"]),
        ("乙", ["光伏组件价格下降让太阳能成为最便宜的电源。"]),
        ("丙", ["太阳能电源的价格还在下降。"]),
    ]
    assert overview(sources) == [
        "光伏组件的价格十年下降了约九成。 [1]",  # what the others say too, not the first line
        "光伏组件价格下降让太阳能成为最便宜的电源。 [2]",
        "太阳能电源的价格还在下降。 [3]",
    ]


def test_nothing_to_say_gives_no_points_and_a_title_falls_back_only_without_headings() -> None:
    assert overview([("Only a title", ["Only a title"])]) == []
    assert title_of_notes(["太阳能发电", "Home batteries"], "notes") == "太阳能发电 · Home batteries"
    assert title_of_notes(["One"], "notes") == "One"
    assert title_of_notes(["", " "], "notes") == "notes"
    assert title_of_notes(["a", "b", "c", "d"], "notes") == "a · b · c …"
