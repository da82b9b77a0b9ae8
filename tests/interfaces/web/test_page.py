"""The page, end to end in Debian's headless Chromium (Playwright): a real ``tether serve``, real turns
on the offline model, real workers. Screenshots of each state go to ``$TETHER_SCREENSHOTS`` (default
``.screenshots/`` at the repository root) for a person to look at."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _kill_game
from tests.support.helpers import ROOT, wait_for
from tests.support.webserver import EventReader, Served, serving

pytestmark = pytest.mark.slow
playwright_sync = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium")
if CHROMIUM is None:  # .ci/run installs it (and fails without it); a developer without it is told
    if os.environ.get("TETHER_TEST_REQUIRE_CHROMIUM") == "1":
        raise RuntimeError("Debian's chromium is required here: apt-get install chromium")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]  # fmt: skip
SHOTS = Path(os.environ.get("TETHER_SCREENSHOTS", ROOT / ".screenshots"))
WAIT_MS = 30_000
TURN_MS = 90_000  # a turn's tool calls, run by the executor in workers: seconds, longer on a loaded machine


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("web-page") / "home"
    home.mkdir()
    with serving(home, TETHER_DEMO_STEP_S="1.0") as server:
        yield server
    _kill_game(home)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_sync.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    opened.set_default_timeout(WAIT_MS)
    opened.goto(served.login)  # sets the token's cookie, then shows the page without it in the URL
    assert opened.url == served.base + "/"
    opened.locator("[data-testid=live][data-state=live]").wait_for()
    yield opened
    context.close()
    assert not errors, errors


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def send(page: Any, text: str) -> None:
    composer = page.get_by_test_id("composer")
    composer.fill(text)
    composer.press("Enter")


def wait_idle(page: Any) -> None:
    page.get_by_test_id("working").wait_for(state="hidden")


def say(page: Any, text: str) -> None:
    """Send ``text`` and wait for the turn's answer."""
    answers = page.get_by_test_id("msg-assistant").count()
    send(page, text)
    page.wait_for_function(
        "n => document.querySelectorAll('[data-testid=msg-assistant]').length > n",
        arg=answers,
        timeout=60_000,
    )
    wait_idle(page)


def new_thread(page: Any) -> None:
    page.get_by_test_id("new-thread").click()


def card_keys(page: Any) -> list[str]:
    cards = page.get_by_test_id("trace-card")
    return [
        f"{cards.nth(i).get_attribute('data-turn')}:{cards.nth(i).get_attribute('data-index')}:"
        f"{cards.nth(i).get_attribute('data-kind')}"
        for i in range(cards.count())
    ]


def test_a_message_shows_its_steps_as_they_happen(page: Any) -> None:
    new_thread(page)
    say(page, "查看游戏状态")
    page.get_by_test_id("msg-user").filter(has_text="查看游戏状态").wait_for()
    page.get_by_test_id("tab-trace").click()
    for kind in ("plan", "action", "observation", "result"):
        page.locator(f"[data-testid=trace-card][data-kind={kind}]").first.wait_for()
    shot(page, "01-conversation-and-trace")


def test_approving_a_destructive_call_runs_it_and_denying_another_runs_nothing(page: Any) -> None:
    new_thread(page)
    say(page, "启动游戏")
    send(page, "分解四星遗器")
    page.get_by_test_id("tab-approvals").click()
    approval = page.get_by_test_id("approvals").get_by_test_id("approval").first
    approval.wait_for()
    assert "demo.salvage_relics" in approval.inner_text()
    assert re.search(r'"rarity":\s*4', approval.inner_text())
    shot(page, "02-approval-waiting")
    answers = page.get_by_test_id("msg-assistant").count()
    approval.get_by_test_id("approve").click()
    page.wait_for_function(
        "n => document.querySelectorAll('[data-testid=msg-assistant]').length > n",
        arg=answers,
        timeout=60_000,
    )
    wait_idle(page)
    page.get_by_test_id("approvals").get_by_test_id("approval").wait_for(state="detached")
    send(page, "分解三星遗器")
    # Only the new question's card: the answered one never comes back (a stale reload once showed it).
    cards = page.get_by_test_id("conversation").get_by_test_id("inline-approval")
    cards.filter(has_text='"rarity": 3').wait_for()
    assert cards.count() == 1
    cards.get_by_test_id("deny").click()
    wait_idle(page)
    cards.first.wait_for(state="detached")
    shot(page, "03-approval-answered")


def test_a_background_job_moves_its_progress_bar_and_stops_from_the_page(page: Any) -> None:
    new_thread(page)
    say(page, "启动游戏")
    say(page, "后台一直刷金币")
    page.get_by_test_id("tab-jobs").click()
    row = page.locator("[data-testid=job-row][data-status=running]").first
    row.wait_for()
    row.locator("progress").wait_for()
    text = row.get_by_test_id("job-progress-text")
    # Looked up again at each check: the list may redraw the row (an element handle would go stale).
    shown = (
        "document.querySelector('[data-testid=job-row][data-status=running] "
        "[data-testid=job-progress-text]')?.textContent.trim()"
    )
    page.wait_for_function(f"() => Boolean({shown})")
    first = text.inner_text().strip()
    # The worker's next report moves it, live (the farm reports each attempt).
    page.wait_for_function(f"was => Boolean({shown}) && {shown} !== was", arg=first)
    shot(page, "04-job-running")
    row.get_by_test_id("job-log").click()
    row.get_by_test_id("job-log-text").wait_for()
    execution_id = row.get_attribute("data-job")
    row.get_by_test_id("job-stop").click()
    page.locator(f"[data-testid=job-row][data-job='{execution_id}'][data-status=stopped]").wait_for()
    shot(page, "05-job-stopped")


def test_a_running_turn_is_cancelled_from_the_page_and_its_job_is_stopped(page: Any, served: Served) -> None:
    new_thread(page)
    say(page, "启动游戏")
    send(page, "刷 30 次金币副本")
    thread = page.evaluate("decodeURIComponent(/thread=([^&]+)/.exec(location.hash)[1])")

    def farm() -> dict[str, Any] | None:
        jobs = served.get("/api/jobs", params={"origin": f"thread:{thread}", "active": True})["items"]
        return next((j for j in jobs if j["task_id"] == "demo.farm_instance"), None)

    job = wait_for(farm, 60, "the farm job to run")
    cancel = page.get_by_test_id("working").get_by_test_id("cancel-turn")
    assert cancel.inner_text() == "Cancel"
    shot(page, "13-turn-running")
    cancel.focus()
    page.keyboard.press("Enter")
    wait_idle(page)
    # The button went with the turn: the focus went on to the message box, not to the top of the page.
    page.wait_for_function("() => document.activeElement?.dataset?.testid === 'composer'")
    answer = page.get_by_test_id("msg-assistant").last
    answer.filter(has_text="取消").wait_for()
    assert "interrupted" in answer.inner_text().lower()
    page.get_by_test_id("notice").filter(has_text="1 job(s) stopped").wait_for()  # when the cancel answers
    assert served.get(f"/api/jobs/{job['execution_id']}")["status"] == "stopped"
    shot(page, "14-turn-cancelled")
    say(page, "查看游戏状态")  # the conversation goes on
    assert served.get(f"/api/threads/{thread}")["turns"] == 3


def test_a_reload_in_the_middle_of_a_turn_loses_nothing_and_shows_nothing_twice(page: Any) -> None:
    new_thread(page)
    send(page, "启动游戏，然后每日实训")
    page.get_by_test_id("tab-trace").click()
    page.locator("[data-testid=trace-card][data-kind=action]").filter(has_text="daily").first.wait_for(
        timeout=TURN_MS
    )  # CI, on a loaded machine: the second call's card took longer than WAIT_MS
    page.reload()  # the cookie keeps it working: the URL no longer holds the token
    assert "token" not in page.url
    page.locator("[data-testid=live][data-state=live]").wait_for()
    page.get_by_test_id("tab-trace").click()
    page.get_by_test_id("msg-user").filter(has_text="每日实训").wait_for()
    page.locator("[data-testid=trace-card][data-kind=result]").first.wait_for(timeout=TURN_MS)
    wait_idle(page)
    keys = card_keys(page)
    assert len(keys) == len(set(keys)), keys
    assert any(k.endswith(":observation") for k in keys)
    shot(page, "06-after-reload")


def test_a_goal_run_goes_through_its_review_point_to_the_end(page: Any) -> None:
    page.get_by_test_id("tab-runs").click()
    page.get_by_test_id("goal-input").fill("启动游戏，然后分解四星遗器")
    page.get_by_test_id("goal-start").click()
    dag = page.get_by_test_id("run-dag")
    waiting = dag.locator("[data-testid=dag-node][data-status=waiting_for_human]")
    waiting.wait_for(timeout=60_000)
    assert dag.get_by_test_id("dag-node").count() == 2
    shot(page, "07-run-waiting")
    waiting.click()
    page.get_by_test_id("task-approve").click()
    page.wait_for_function(
        "() => { const nodes = [...document.querySelectorAll('[data-testid=dag-node]')];"
        " return nodes.length === 2 && nodes.every(n => n.dataset.status === 'completed'); }",
        timeout=60_000,
    )
    shot(page, "08-run-completed")


def test_the_language_switches_and_the_page_fits_a_phone_in_the_dark(browser: Any, served: Served) -> None:
    context = browser.new_context(
        locale="zh-CN", viewport={"width": 390, "height": 844}, color_scheme="dark", is_mobile=True
    )
    page = context.new_page()
    page.goto(served.login)
    page.locator("[data-testid=live][data-state=live]").wait_for()
    assert page.evaluate("document.documentElement.lang").startswith("zh")
    page.get_by_test_id("nav-threads").click()
    zh = page.get_by_test_id("new-thread").inner_text()
    shot(page, "09-phone-dark-zh")
    page.get_by_test_id("lang-switch").click()
    assert page.evaluate("document.documentElement.lang") == "en"
    assert page.get_by_test_id("new-thread").inner_text() != zh
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width}px wide on a 390px screen"
    shot(page, "10-phone-dark-en")
    context.close()


def test_the_keyboard_alone_can_send_a_message(page: Any) -> None:
    new_thread(page)
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement?.dataset?.testid") == "composer":
            break
    else:
        pytest.fail("Tab never reached the composer")
    page.keyboard.type("查看游戏状态")
    page.keyboard.press("Enter")
    page.get_by_test_id("msg-assistant").first.wait_for()
    wait_idle(page)


def test_a_researched_handout_is_approved_over_old_files_and_downloaded_from_the_page(
    page: Any, served: Served
) -> None:
    from tests.support.research_site import research_site

    handouts = served.home / "workspace" / "handouts"
    handouts.mkdir(parents=True, exist_ok=True)
    (handouts / "sun.pptx").write_bytes(b"old deck")
    with research_site() as site:
        site.configure(served.home)
        new_thread(page)
        page.get_by_test_id("format-pptx").check()
        page.get_by_test_id("format-pdf").check()
        send(page, "搜索一下 太阳能发电 然后写成讲义 保存到 handouts/sun 覆盖")
        card = page.get_by_test_id("conversation").get_by_test_id("inline-approval")
        card.filter(has_text="documents.generate").wait_for(timeout=90_000)
        assert (handouts / "sun.pptx").read_bytes() == b"old deck"
        shot(page, "08-overwrite-approval")
        card.get_by_test_id("approve").click()
        files = page.get_by_test_id("artifact")
        page.locator("[data-testid=artifact][data-format=pdf]").wait_for(timeout=90_000)
        page.locator("[data-testid=artifact][data-format=pptx]").wait_for()
        assert files.count() == 2
    wait_idle(page)
    shot(page, "09-files")
    with page.expect_download() as info:
        page.locator("[data-testid=artifact][data-format=pptx]").get_by_test_id("artifact-download").click()
    download = info.value
    assert download.suggested_filename.endswith(".pptx")
    data = Path(download.path()).read_bytes()
    assert data.startswith(b"PK") and data == (handouts / "sun.pptx").read_bytes()


def gets_in_by_itself(page: Any) -> None:
    """Wait until a refused page, trying again by itself, follows the events (says live). It tries again
    after a backoff of up to 15 s; its clock (``page.clock.install()`` before it loaded) is moved on
    meanwhile, so each try comes at once instead: the page still has to make it and get in."""

    def live() -> bool:
        page.clock.fast_forward(2_000)
        return page.evaluate("document.querySelector('[data-testid=live]').dataset.state") == "live"

    wait_for(live, timeout=60, what="the page to get in by itself")


@pytest.mark.parametrize(("locale", "words"), [("en-US", "open the link"), ("zh-CN", "打开")])
def test_a_page_opened_without_the_token_says_how_to_get_in(
    browser: Any, served: Served, locale: str, words: str
) -> None:
    context = browser.new_context(locale=locale)
    page = context.new_page()
    page.clock.install()  # the page's own timers: its next try to follow the events can be brought forward
    page.goto(served.base + "/")  # a bookmark, or another local user: no cookie, no token
    page.locator("[data-testid=live][data-state=unauthorized]").wait_for(timeout=WAIT_MS)
    error = page.get_by_test_id("error")
    error.wait_for(timeout=WAIT_MS)
    assert words in error.inner_text().lower() and "tether serve" in error.inner_text()
    shot(page, f"11-no-token-{locale}")
    # Opening the printed URL (in another tab of the same browser) lets this page in, by itself.
    other = context.new_page()
    other.goto(served.login)
    gets_in_by_itself(page)
    context.close()


@pytest.fixture(scope="module")
def one_stream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server that lets one page follow its events at a time, with a heartbeat a second (not 5 s): a
    reader that leaves is noticed at the next one, and its slot is free again."""
    home = tmp_path_factory.mktemp("web-one-stream") / "home"
    home.mkdir()
    with serving(home, "--max-streams", "1", TETHER_WEB_HEARTBEAT_S="1") as server:
        yield server


def _the_one_slot(served: Served) -> EventReader:
    """A reader that holds the one slot (the page of an earlier test may still hold it for a heartbeat)."""

    def admitted() -> EventReader | None:
        reader = EventReader(served)
        return reader if reader.admitted() else None  # a refused reader has ended already

    return wait_for(admitted, timeout=30, what="the one event stream slot to be free")


@pytest.mark.parametrize(
    ("locale", "words"), [("en-US", "as many pages as it allows"), ("zh-CN", "已达上限")]
)
def test_a_page_refused_the_live_stream_says_why_and_gets_in_once_a_slot_frees(
    browser: Any, one_stream: Served, locale: str, words: str
) -> None:
    served = one_stream
    holder = _the_one_slot(served)  # another page that reads: it keeps its slot
    context = browser.new_context(locale=locale)
    page = context.new_page()
    page.clock.install()  # the page's own timers: its next try to follow the events can be brought forward
    page.goto(served.login)
    page.locator("[data-testid=live][data-state=busy]").wait_for(timeout=WAIT_MS)
    error = page.get_by_test_id("error")
    assert words in error.inner_text(), error.inner_text()
    shot(page, f"12-streams-full-{locale}")
    holder.close()
    gets_in_by_itself(page)
    assert error.is_hidden()
    context.close()


def test_a_thread_is_given_to_the_agent_picked_and_says_who_answers(page: Any, served: Served) -> None:
    served.post("/api/agents", {"name": "gamer", "grants": ["automation", "jobs"]}, expect=201)
    page.reload()
    page.locator("[data-testid=live][data-state=live]").wait_for()
    page.get_by_test_id("agent-picker").select_option("gamer")
    new_thread(page)
    label = page.get_by_test_id("thread-agent")
    label.wait_for()
    assert "gamer" in label.inner_text()
    say(page, "查看游戏状态")
    thread_id = page.evaluate("() => decodeURIComponent(location.hash.split('thread=')[1])")
    assert served.get(f"/api/threads/{thread_id}")["agent"] == "gamer"
    page.get_by_test_id("thread-item").filter(has_text="gamer").first.wait_for()
    # The default assistant is picked again for the next thread, and no label is shown for it.
    page.get_by_test_id("agent-picker").select_option("assistant")
    new_thread(page)
    page.wait_for_function("() => document.querySelector('[data-testid=thread-agent]').hidden")


def test_an_agents_activity_shows_what_it_is_doing_and_settles_to_idle(page: Any, served: Served) -> None:
    new_thread(page)
    activity = page.get_by_test_id("agent-activity")
    assert activity.get_attribute("data-activity") == "idle"
    seen: list[str] = []
    page.expose_function("recordActivity", lambda value: seen.append(value))
    page.evaluate(
        """() => new MutationObserver(() => window.recordActivity(
               document.querySelector('[data-testid=agent-activity]').dataset.activity))
           .observe(document.querySelector('[data-testid=agent-activity]'), {attributes: true})"""
    )
    say(page, "查看游戏状态")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=agent-activity]').dataset.activity === 'idle'"
    )
    assert "thinking" in seen and "automation" in seen, seen  # demo.status is the automation's


def test_a_delegation_is_done_on_the_page_and_its_thread_opens_from_the_trace(
    page: Any, served: Served
) -> None:
    served.post("/api/agents", {"name": "lead", "grants": ["team", "automation"]}, expect=201)
    served.post(
        "/api/agents", {"name": "looker", "grants": ["automation"], "aliases": ["看守助手"]}, expect=201
    )
    page.reload()
    page.locator("[data-testid=live][data-state=live]").wait_for()
    page.get_by_test_id("agent-picker").select_option("lead")
    new_thread(page)
    say(page, "让看守助手查看游戏状态")
    assert "looker" in page.get_by_test_id("msg-assistant").last.inner_text()
    page.get_by_test_id("tab-trace").click()
    # The tree: under the call that handed the work over, what the sub-agent decided, ran and said.
    tree = page.get_by_test_id("delegation-tree").first
    ran = tree.locator("[data-testid=tree-line][data-kind=tool]").first

    # One click: the trace is drawn again as the turn's record lands, and the tree moves into the new card
    # as the same element (a click on the one it replaced was lost).
    tree.locator("summary").click()
    ran.wait_for()
    assert "demo.status" in ran.inner_text()
    assert tree.locator("[data-testid=tree-line][data-kind=final]").count() == 1
    shot(page, "14-a-delegation-as-a-tree")
    tree.get_by_test_id("open-delegation").click()
    label = page.get_by_test_id("thread-agent")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=thread-agent]').textContent.includes('looker')"
    )
    assert "looker" in label.inner_text()
    thread_id = page.evaluate("() => decodeURIComponent(location.hash.split('thread=')[1])")
    shown = served.get(f"/api/threads/{thread_id}")
    assert shown["agent"] == "looker" and shown["parent"]
    shot(page, "14-a-delegation-and-its-thread")  # (after the tree above)


def test_an_image_is_attached_on_the_page_and_the_offline_model_says_it_cannot_see_it(
    page: Any, tmp_path: Path
) -> None:
    from tests.agent.test_images import PNG

    picture = tmp_path / "dot.png"
    picture.write_bytes(PNG)
    new_thread(page)
    page.get_by_test_id("image-input").set_input_files(str(picture))
    assert "1" in page.get_by_test_id("attached").inner_text()
    say(page, "what is in this picture?")
    assert "cannot see images" in page.get_by_test_id("msg-assistant").last.inner_text()
    assert page.get_by_test_id("attached").inner_text() == ""  # sent once, then cleared
    shot(page, "15-an-image-the-model-cannot-see")


def test_memory_is_seen_searched_and_forgotten_on_the_page_and_a_thread_made_private(
    page: Any, served: Served
) -> None:
    served.http.patch("/api/agents/assistant", json={"grants": ["all", "memory"]})
    new_thread(page)
    say(page, "记住：我的经理叫王芳")
    assert "记下了" in page.get_by_test_id("msg-assistant").last.inner_text()
    page.get_by_test_id("tab-memory").click()
    item = page.get_by_test_id("memory-item").first
    item.wait_for()
    assert "我的经理叫王芳" in item.inner_text()
    page.get_by_test_id("memory-input").fill("经理叫什么")
    page.get_by_test_id("memory-search").click()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=memory-item]')?.dataset.kind === 'fact'"
    )
    shot(page, "16-what-the-assistant-remembers")
    page.get_by_test_id("memory-forget").first.click()
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=memory-item]')"
        " && document.querySelector('[data-testid=memory-list] .empty')"
    )
    assert served.get("/api/memory")["facts"] == []
    toggle = page.get_by_test_id("private-thread")
    assert toggle.get_attribute("aria-pressed") == "false"
    toggle.click()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=private-thread]').getAttribute('aria-pressed') === 'true'"
    )
    thread_id = page.evaluate("() => decodeURIComponent(location.hash.split('thread=')[1])")
    assert served.get(f"/api/threads/{thread_id}")["private"] is True


def test_a_proactive_message_arrives_live_is_rated_and_a_schedule_is_added_on_the_page(
    page: Any, served: Served
) -> None:
    page.get_by_test_id("tab-notices").click()
    fired = served.http.post("/api/signals", json={"text": "服务器宕机了", "source": "监控"}).json()
    assert fired["fired"]
    item = page.get_by_test_id("notice-item").first
    item.wait_for()  # arrived through the event stream: nobody reloaded
    assert "监控: 服务器宕机了" in item.inner_text()
    item.get_by_test_id("notice-note").fill("已经知道了")
    item.get_by_test_id("notice-down").click()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=notice-down]')?.getAttribute('aria-pressed') === 'true'"
    )
    rated = served.get("/api/initiative?fired=true")["decisions"][0]
    assert rated["id"] == fired["id"] and rated["rating"] == -1 and rated["rating_note"] == "已经知道了"
    # In its thread, the message is the agent's, marked as spoken first, with no message of the person's.
    page.goto(f"{served.base}/#thread=notices-assistant")
    bubble = page.get_by_test_id("msg-proactive").first
    bubble.wait_for()
    assert "服务器宕机了" in bubble.inner_text() and page.get_by_test_id("msg-user").count() == 0
    # A schedule: added, fired now, removed.
    page.get_by_test_id("tab-notices").click()
    page.get_by_test_id("schedule-name").fill("plants")
    page.get_by_test_id("schedule-cron").fill("0 9 * * *")
    page.get_by_test_id("schedule-remind").fill("浇花")
    page.get_by_test_id("schedule-add").click()
    schedule = page.locator("[data-testid=schedule-item][data-name=plants]")
    schedule.wait_for()
    shot(page, "17-notices-and-schedules")
    schedule.get_by_test_id("schedule-run").click()
    wait_for(
        lambda: any(d["kind"] == "schedule" for d in served.get("/api/initiative")["decisions"]),
        timeout=60, what="the schedule run now",
    )  # fmt: skip
    schedule.get_by_test_id("schedule-remove").click()
    page.wait_for_function("() => !document.querySelector('[data-testid=schedule-item][data-name=plants]')")
    assert served.get("/api/schedules")["schedules"] == []
