"""A slow model on the page: while it reads a cold prompt (minutes on a CPU), the running turn says the
model is thinking, with the seconds so far, then the tokens as they come — never a frozen "working…"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interfaces.web.test_page import ARGS, CHROMIUM, WAIT_MS, playwright_sync, send, shot
from tests.support.fake_openai import FakeOpenAI, chunk
from tests.support.webserver import Served, serving

pytestmark = pytest.mark.slow


@pytest.fixture
def slow_model() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    words = [chunk({"content": f"word{n} "}) for n in range(12)] + [chunk({}, "stop")]
    fake.stream(words, first_delay=6.0, gap=0.6)  # a first ModelThinking at 5 s, before any token
    yield fake
    fake.close()


@pytest.fixture
def served(home: Path, slow_model: FakeOpenAI) -> Iterator[Served]:
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "vllm"\nmodel = "qwen2.5"\nbase_url = "{slow_model.url}"\n', encoding="utf-8"
    )
    with serving(home, TETHER_MODEL_STREAM="1") as server:
        yield server


def test_a_slow_model_is_seen_thinking_then_writing(served: Served) -> None:
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 900})
            page: Any = context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(served.login)
            page.locator("[data-testid=live][data-state=live]").wait_for()
            send(page, "is the game on?")
            working = page.get_by_test_id("working")
            page.wait_for_function(
                "() => /the model is thinking… \\d+ s/.test(document.querySelector('[data-testid=working]')"
                "?.textContent || '')"
            )
            shot(page, "thinking")
            page.wait_for_function(
                "() => /the model is writing… \\d+ s, \\d+ tokens/.test("
                "document.querySelector('[data-testid=working]')?.textContent || '')"
            )
            working.wait_for(state="hidden", timeout=60_000)
            assert "word11" in page.get_by_test_id("msg-assistant").last.text_content()
        finally:
            browser.close()
