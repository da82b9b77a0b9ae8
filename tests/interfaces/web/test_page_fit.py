"""The page fits every state it can be in, in both languages, at a phone's width and a desktop's: a notice
never covers a control, every tab and its count stays on screen, and long words (a title, a path, an id
with no space to break at) wrap inside their card. The states are real: a real ``tether serve`` whose
threads, runs, jobs, schedules and questions carry the longest texts the API accepts."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import _kill_game
from tests.interfaces.web.browsing import (
    COVERED,
    DESKTOP,
    OVERFLOWING,
    PHONE,
    TABS_OFF,
    Opened,
    require_chromium,
    set_lang,
    shot,
)
from tests.support.helpers import wait_for
from tests.support.webserver import Served, serving

pytestmark = pytest.mark.slow
require_chromium()
LONG_WORD = "Superlongunbrokenwordwithoutanyspace" * 6  # 216 characters, nowhere to break
SMALL_PHONE = {"width": 320, "height": 640}
TABLET = {"width": 860, "height": 1000}  # the three columns at their narrowest
SKIP_LINKS_AWAY = (
    "[...document.querySelectorAll('.skip-link')].every(a => a.getBoundingClientRect().bottom <= 0)"
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("web-fit") / "home"
    home.mkdir()
    with serving(home, TETHER_DEMO_STEP_S="0.05") as server:
        _long_states(server)
        yield server
    _kill_game(home)


def _long_states(served: Served) -> None:
    """A thread titled with a long word, a message of long words, a question waiting, a goal run with a long
    goal, a schedule with a long reminder: every kind of card, holding text with nowhere to break."""
    thread = served.post("/api/threads", {"title": LONG_WORD[:200]}, expect=201)["thread_id"]

    def idle() -> bool:
        return not served.get(f"/api/threads/{thread}")["running"]

    for text in ("启动游戏", f"查看游戏状态 {LONG_WORD}", "分解四星遗器"):
        served.post(f"/api/threads/{thread}/messages", {"text": text}, expect=202)
        wait_for(lambda: served.get(f"/api/threads/{thread}")["turns"] >= 1 and idle(), 60, "a turn")
    wait_for(lambda: served.get("/api/confirmations")["items"], 60, "a question waiting")
    run = served.post("/api/runs", {"goal": "启动游戏，然后分解四星遗器"}, expect=201)["run_id"]
    # The offline planner plans no goal it cannot read: the goal's words are made long in the record.
    with sqlite3.connect(served.home / "tether.db") as db:
        db.execute(
            "UPDATE runs SET goal = ? WHERE run_id = ?", (f"启动游戏，然后分解四星遗器 {LONG_WORD}", run)
        )
    served.post("/api/schedules", {"name": "long", "cron": "0 9 * * *", "remind": LONG_WORD})
    served.post("/api/signals", {"text": LONG_WORD, "source": "monitor"})


def _views(phone: bool) -> list[tuple[str, str]]:
    """(how to get there, its name): each pane and panel of the page."""
    tabs = ["trace", "jobs", "approvals", "runs", "memory", "notices"]
    if phone:
        return [(f"nav-{v}", v) for v in ["threads", "chat", *tabs]]
    return [("nav-none", "chat"), *((f"tab-{v}", v) for v in tabs)]


def _open_everything(page: Any, served: Served) -> None:
    """The thread of long words open: its messages, its question waiting, its steps."""
    threads = served.get("/api/threads")["items"]
    thread = next(t["thread_id"] for t in threads if t["title"] == LONG_WORD[:200])
    page.goto(f"{served.base}/#thread={thread}")
    page.get_by_test_id("inline-approval").wait_for()


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(
    "viewport", [DESKTOP, TABLET, PHONE, SMALL_PHONE], ids=["desktop", "tablet", "phone", "small"]
)
def test_every_view_keeps_long_words_in_their_cards_and_every_tab_on_screen(
    browser: Any, served: Served, lang: str, viewport: dict[str, int]
) -> None:
    opened = Opened(browser, served, lang=lang, viewport=viewport)
    page = opened.page
    phone = viewport["width"] < 800
    _open_everything(page, served)
    width = viewport["width"]
    for control, view in _views(phone):
        if control != "nav-none":
            page.get_by_test_id(control).click()
        if view == "runs":
            page.get_by_test_id("run-item").first.click()
            page.get_by_test_id("run-dag").wait_for()
            page.get_by_test_id("dag-node").last.click()
            page.get_by_test_id("task-detail").wait_for()
        if view == "approvals":
            page.get_by_test_id("approvals").locator(".approval").first.wait_for()
        assert page.evaluate(TABS_OFF) == [], (view, page.evaluate(TABS_OFF))
        assert page.evaluate(OVERFLOWING) == [], (view, page.evaluate(OVERFLOWING))
        assert page.evaluate(COVERED) == [], (view, page.evaluate(COVERED))
        assert page.evaluate(SKIP_LINKS_AWAY), "a skip link shows before it is focused"
        if view in ("chat", "runs", "approvals") and width != 320:
            shot(page, f"fit-{view}-{lang}-{width}")
    opened.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_notice_and_an_error_cover_no_control_until_they_go(
    browser: Any, served: Served, lang: str, viewport: dict[str, int]
) -> None:
    opened = Opened(browser, served, lang=lang, viewport=viewport)
    page = opened.page
    set_lang(page, lang)
    _open_everything(page, served)
    # An error (a schedule the server refuses) and a notice (a thread deleted) at once.
    if viewport["width"] < 800:
        page.get_by_test_id("nav-notices").click()
    else:
        page.get_by_test_id("tab-notices").click()
    page.get_by_test_id("schedule-name").fill("bad")
    page.get_by_test_id("schedule-cron").fill("not a cron at all")
    page.get_by_test_id("schedule-add").click()
    page.get_by_test_id("error").wait_for()
    throwaway = served.post("/api/threads", {"title": "to delete"}, expect=201)["thread_id"]
    page.goto(f"{served.base}/#thread={throwaway}")
    page.get_by_test_id("chat-empty").wait_for()
    page.get_by_test_id("thread-title").filter(has_text="to delete").wait_for()
    page.get_by_test_id("delete-thread").click()
    page.get_by_test_id("confirm-ok").click()
    page.get_by_test_id("notice").wait_for()
    page.get_by_test_id("error").wait_for()
    assert page.evaluate(COVERED) == [], page.evaluate(COVERED)
    assert page.evaluate(OVERFLOWING) == [], page.evaluate(OVERFLOWING)
    shot(page, f"banners-{lang}-{viewport['width']}")
    for view in ("threads", "approvals", "runs") if viewport["width"] < 800 else ():
        page.get_by_test_id(f"nav-{view}").click()
        assert page.evaluate(COVERED) == [], (view, page.evaluate(COVERED))
    opened.close()


def test_the_tab_bar_of_a_phone_keeps_every_tab_and_count_in_both_languages(
    browser: Any, served: Served
) -> None:
    widths = (320, 360, 390, 430, 600, 799)
    for lang in ("en", "zh"):
        # One phone context per language (every width here is a phone's); the page is loaded afresh at
        # each width, as a new context would load it.
        opened = Opened(browser, served, lang=lang, viewport={"width": widths[0], "height": 800})
        page = opened.page
        for width in widths:
            if width != widths[0]:
                page.set_viewport_size({"width": width, "height": 800})
                page.reload()
                page.locator("[data-testid=live][data-state=live]").wait_for()
            assert page.evaluate("innerWidth") == width
            page.locator("[data-testid=nav-approvals] .badge:not([hidden])").wait_for()  # a count shows
            off = page.evaluate(TABS_OFF)
            assert off == [], (lang, width, off)
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            if width == 390:
                shot(page, f"tabbar-{lang}-{width}")
        opened.close()
