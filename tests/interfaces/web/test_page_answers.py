"""What waits for a person, on the page: a conversation's question and a goal run's review point are both
in Approvals and its count, reached from the keyboard in a few keys (a skip link goes straight there),
answered in the conversation's own language, and the focus goes on to the next thing to answer. Jobs read
as what they were: an ask for consent is not a refusal, and an ended job's bar stands still."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import _kill_game
from tests.interfaces.web.browsing import PHONE, Opened, require_chromium, shot
from tests.support.helpers import wait_for
from tests.support.webserver import Served, serving

pytestmark = pytest.mark.slow
require_chromium()
TABS_TO_THE_QUESTION = 10  # from the top of the page, without the skip link (it took 21 with 8 threads)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("web-answers") / "home"
    home.mkdir()
    with serving(home, TETHER_DEMO_STEP_S="1.0") as server:
        yield server
    _kill_game(home)


MORE_ANSWERS = "n => document.querySelectorAll('[data-testid=msg-assistant]').length > n"


def say(page: Any, text: str) -> None:
    answers = page.get_by_test_id("msg-assistant").count()
    page.get_by_test_id("composer").fill(text)
    page.get_by_test_id("composer").press("Enter")
    page.wait_for_function(MORE_ANSWERS, arg=answers, timeout=60_000)
    page.get_by_test_id("working").wait_for(state="hidden")


def active(page: Any) -> str:
    return page.evaluate("document.activeElement?.dataset?.testid || document.activeElement?.id || ''")


def asked(served: Served, title: str) -> str:
    """A thread (made through the API) whose destructive call waits for the person's answer."""
    thread = served.post("/api/threads", {"title": title}, expect=201)["thread_id"]
    for text in ("启动游戏", "分解三星遗器"):
        turns = served.get(f"/api/threads/{thread}")["turns"]
        served.post(f"/api/threads/{thread}/messages", {"text": text}, expect=202)

        def answered(turns: int = turns) -> bool:
            now = served.get(f"/api/threads/{thread}")
            return now["turns"] > turns and not now["running"]

        wait_for(answered, 60, f"the answer to {text}")
    return thread


def test_a_question_is_reached_in_three_keys_answered_in_chinese_and_the_focus_goes_on(
    browser: Any, served: Served
) -> None:
    for n in range(8):  # a long thread list: it once cost a Tab per thread to get past
        served.post("/api/threads", {"title": f"older {n}"}, expect=201)
    opened = Opened(browser, served, lang="zh")
    page = opened.page
    page.get_by_test_id("new-thread").click()
    page.get_by_test_id("format-md").check()
    say(page, "启动游戏")
    assert not page.get_by_test_id("format-md").is_checked()  # the files asked for went with that message
    # The list counts the turn as it happens (it said "0 turns" for a new thread until read again).
    assert "1 轮" in page.locator("[data-testid=thread-item][aria-current=true]").inner_text()
    page.get_by_test_id("composer").fill("分解四星遗器")
    page.get_by_test_id("composer").press("Enter")
    card = page.get_by_test_id("conversation").get_by_test_id("inline-approval")
    card.wait_for(timeout=60_000)
    page.get_by_test_id("skip-waiting").wait_for()  # shown while something waits
    # Without the skip link: a sensible number of Tabs from the top (the page's first stop).
    top = page.locator("a.skip-link").first
    top.focus()
    tabs = 0
    while active(page) != "approve" and tabs < 40:
        page.keyboard.press("Tab")
        tabs += 1
    assert tabs <= TABS_TO_THE_QUESTION, f"{tabs} Tabs to the Approve button"
    # With it: Tab, Enter.
    top.focus()
    page.keyboard.press("Tab")
    assert active(page) == "skip-waiting"
    shot(page, "skip-to-the-question-zh-1400")
    page.keyboard.press("Enter")
    assert active(page) == "approve"
    answers = page.get_by_test_id("msg-assistant").count()
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement?.dataset?.testid === 'composer'")
    page.wait_for_function(MORE_ANSWERS, arg=answers, timeout=60_000)
    assert page.get_by_test_id("msg-user").last.locator(".msg-text").inner_text() == "是"
    page.get_by_test_id("skip-waiting").wait_for(state="hidden")  # nothing waits any more
    shot(page, "approved-in-chinese-zh-1400")
    # The job list says what ran: the call once, completed — its ask for consent is not a "rejected" job.
    page.get_by_test_id("tab-jobs").click()
    page.get_by_test_id("jobs-all").click()
    salvage = page.get_by_test_id("job-row").filter(has_text="demo.salvage_relics")
    salvage.first.wait_for()
    page.locator("[data-testid=job-row][data-status=completed]").filter(
        has_text="demo.salvage_relics"
    ).wait_for()
    assert [salvage.nth(i).get_attribute("data-status") for i in range(salvage.count())] == ["completed"]
    shot(page, "jobs-after-approval-zh-1400")
    opened.close()


def test_answering_one_of_several_questions_moves_the_focus_to_the_next(browser: Any, served: Served) -> None:
    first, second = asked(served, "first question"), asked(served, "second question")
    opened = Opened(browser, served, lang="en", viewport=PHONE)
    page = opened.page
    page.get_by_test_id("nav-approvals").click()
    cards = page.get_by_test_id("approvals").get_by_test_id("approval")
    page.locator(f"[data-testid=approval][data-thread='{first}']").wait_for()
    page.locator(f"[data-testid=approval][data-thread='{second}']").wait_for()
    shot(page, "approvals-two-waiting-en-390")
    count = cards.count()
    cards.first.get_by_test_id("deny").focus()
    page.keyboard.press("Enter")
    page.wait_for_function("n => document.querySelectorAll('[data-testid=approval]').length < n", arg=count)
    focused = page.evaluate("document.activeElement.closest('[data-testid=approval]')?.dataset.pending || ''")
    assert focused, f"the focus went to {active(page)!r}, not to the next question"
    page.get_by_test_id("notice").wait_for()
    shot(page, "approvals-focus-moved-on-en-390")
    opened.close()


def test_a_goal_runs_review_point_waits_in_approvals_and_its_count_until_answered_there(
    browser: Any, served: Served
) -> None:
    opened = Opened(browser, served, lang="en")
    page = opened.page
    before = len(served.get("/api/reviews")["items"])
    run = served.post("/api/runs", {"goal": "启动游戏，然后分解四星遗器"}, expect=201)["run_id"]
    review = page.locator(f"[data-testid=review][data-run='{run}']")
    badge = page.get_by_test_id("badge-approvals")
    page.get_by_test_id("tab-approvals").click()
    review.wait_for(timeout=60_000)  # arrived live: nobody reloaded
    total = len(served.get("/api/confirmations")["items"]) + before + 1
    wait_for(lambda: badge.inner_text() == str(total), 15, f"the count to say {total}")
    shot(page, "review-point-in-approvals-en-1400")
    review.get_by_test_id("review-approve").click()
    review.wait_for(state="detached")
    wait_for(lambda: served.get(f"/api/runs/{run}")["status"] == "completed", 60, "the run to end")
    wait_for(lambda: badge.is_hidden() or badge.inner_text() == str(total - 1), 15, "the count to drop")
    opened.close()


def test_an_ended_job_keeps_no_moving_bar(browser: Any, served: Served) -> None:
    opened = Opened(browser, served, lang="en")
    page = opened.page
    page.get_by_test_id("new-thread").click()
    say(page, "启动游戏")
    say(page, "后台一直刷金币")
    page.get_by_test_id("tab-jobs").click()
    row = page.locator("[data-testid=job-row][data-status=running]").first
    row.locator("progress").wait_for()
    row.get_by_test_id("job-stop").focus()
    page.keyboard.press("Enter")  # from the keyboard: the button goes with the job, the focus stays here
    page.get_by_test_id("jobs-all").click()
    page.locator("[data-testid=job-row][data-status=stopped]").first.wait_for()
    moving = """() => [...document.querySelectorAll('[data-testid=job-row]')]
        .filter(row => !['pending', 'starting', 'running'].includes(row.dataset.status))
        .filter(row => row.querySelector('progress:indeterminate:not([hidden])')
            || row.getAnimations({subtree: true}).some(a => a.playState === 'running'))
        .map(row => row.dataset.status)"""
    assert page.evaluate(moving) == []
    page.wait_for_function("() => document.activeElement !== document.body")
    assert page.evaluate("document.getElementById('panel-jobs').contains(document.activeElement)")
    shot(page, "job-stopped-en-1400")
    opened.close()
