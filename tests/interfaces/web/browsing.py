"""What the page tests share: Debian's chromium driven by Playwright, a page opened logged in at a width and
in a language, screenshots under ``.screenshots/page/``, and checks that hold for every state of the page
(nothing covers a control, no text runs out of its card, nothing runs off the screen)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import ROOT
from tests.support.webserver import Served

CHROMIUM = shutil.which("chromium")
ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]  # fmt: skip
SHOTS = Path(os.environ.get("TETHER_SCREENSHOTS", ROOT / ".screenshots")) / "page"
WAIT_MS = 30_000
DESKTOP = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
LOCALES = {"en": "en-US", "zh": "zh-CN"}


def require_chromium() -> str:
    if CHROMIUM is None:  # .ci/run installs it (and fails without it); a developer without it is told
        if os.environ.get("TETHER_TEST_REQUIRE_CHROMIUM") == "1":
            raise RuntimeError("Debian's chromium is required here: apt-get install chromium")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)
    return CHROMIUM


class Opened:
    """A logged-in page in its own browser context; errors on the page's console fail the test."""

    def __init__(
        self, browser: Any, served: Served, *, lang: str = "en", viewport: dict[str, int] | None = None
    ):
        view = viewport or DESKTOP
        self.context = browser.new_context(
            locale=LOCALES[lang], viewport=view, is_mobile=view["width"] < 800, has_touch=view["width"] < 800
        )
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.set_default_timeout(WAIT_MS)
        self.page.goto(served.login)
        self.page.locator("[data-testid=live][data-state=live]").wait_for()

    def close(self) -> None:
        self.context.close()
        assert not self.errors, self.errors


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def set_lang(page: Any, lang: str) -> None:
    if not page.evaluate("document.documentElement.lang").startswith(lang):
        page.get_by_test_id("lang-switch").click()
        page.wait_for_function("lang => document.documentElement.lang.startsWith(lang)", arg=lang)


# Every control that can be seen is the topmost element at its centre (no banner, toast or panel over it).
COVERED = """() => {
  const controls = [...document.querySelectorAll(
    'button, a[href], input, textarea, select, [role=tab], [tabindex="0"], h2, .badge')];
  const out = [];
  for (const el of controls) {
    const r = el.getBoundingClientRect();
    if (!r.width || !r.height || el.closest('[hidden], dialog:not([open])')) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || el.classList.contains('skip-link')) continue;
    if (el.closest('.visually-hidden') || el.matches('.visually-hidden')) continue;
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    if (x < 0 || y < 0 || x > innerWidth || y > innerHeight) continue;  // scrolled away, not covered
    const top = document.elementFromPoint(x, y);
    if (!top || el.contains(top) || top.contains(el) || top.closest('label')?.contains(el)) continue;
    // Scrolled out of a pane (or of the graph's own scroller): clipped away there, not covered.
    let clipped = false;
    for (let p = el.parentElement; p && !clipped; p = p.parentElement) {
      const st = getComputedStyle(p);
      if (st.overflowX === 'visible' && st.overflowY === 'visible') continue;
      const s = p.getBoundingClientRect();
      clipped = y < s.top || y > s.bottom || x < s.left || x > s.right;
    }
    if (clipped) continue;
    const name = (node) => node.dataset.testid || node.id || node.className || node.tagName;
    out.push(`${name(el)} under ${name(top)}`);
  }
  return out;
}"""

# No text runs out of the card it is in, and nothing runs off the right edge of the screen.
OVERFLOWING = """() => {
  const cards = '.msg, .approval, .trace-card, .job-row, .run-item, .run-head, .thread-item, .memory-item, '
    + '.notice-item, .schedule-item, .banner, .task-detail, .chat-head, .files, .turn-heading';
  const out = [];
  for (const card of document.querySelectorAll(cards)) {
    const c = card.getBoundingClientRect();
    if (!c.width || card.closest('[hidden]')) continue;
    if (c.right > document.documentElement.clientWidth + 1) out.push(`${card.className} off the screen`);
    for (const el of card.querySelectorAll('*')) {
      const r = el.getBoundingClientRect();
      if (!r.width || !r.height) continue;
      let clipped = false;  // inside its own horizontal scroller (a JSON block, the graph): it scrolls
      for (let p = el.parentElement; p && p !== card; p = p.parentElement) {
        if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX)) clipped = true;
      }
      if (!clipped && r.right > c.right + 1) {
        const by = Math.round(r.right - c.right);
        out.push(`${el.tagName}.${el.className} runs ${by}px out of ${card.className}`);
      }
    }
  }
  // Text cut off sideways (clipped, not wrapped): a title that shows only its first letters.
  for (const el of document.querySelectorAll('h2, h3, .thread-title, .turn-ask, .run-goal, .msg-text, p')) {
    if (!el.getClientRects().length || el.closest('[hidden]')) continue;
    if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'auto') {
      out.push(`${el.tagName}.${el.className} is cut off sideways`);
    }
  }
  // A short label broken over lines (a squeezed column split "Threads" into "Thread s").
  const labels = '.pane-head h2, .msg-meta > *, .chip, .card-kind, .turn-heading > span';
  for (const el of document.querySelectorAll(labels)) {
    const r = el.getBoundingClientRect();
    const line = parseFloat(getComputedStyle(el).lineHeight);
    if (r.height && line && r.height > line * 1.6 && !el.matches('.turn-ask')) {
      out.push(`the label "${el.textContent.trim()}" is broken over lines`);
    }
  }
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) out.push('the page scrolls sideways');
  return out;
}"""

# Every tab (and its count) is whole on the screen.
TABS_OFF = """() => {
  const out = [];
  for (const tab of document.querySelectorAll('[role=tab], [role=tab] .badge')) {
    const r = tab.getBoundingClientRect();
    if (!r.width || tab.closest('[hidden]')) continue;
    if (getComputedStyle(tab.closest('[role=tablist]')).display === 'none') continue;
    if (r.left < -1 || r.right > document.documentElement.clientWidth + 1) out.push(tab.textContent.trim());
    const list = tab.closest('[role=tablist]').getBoundingClientRect();
    if (r.right > list.right + 1 || r.left < list.left - 1) out.push(`${tab.textContent.trim()} clipped`);
  }
  return out;
}"""
