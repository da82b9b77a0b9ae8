"""What the model calls cost, on the page: a turn's heading in the trace and each plan card say the
tokens the model service reported and the time; a goal run's header says its total. A real ``tether
serve`` whose model is a fake OpenAI-compatible server on 127.0.0.1 that reports usage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.interfaces.web.test_page import ARGS, CHROMIUM, WAIT_MS, playwright_sync, send, shot
from tests.support.fake_openai import FakeOpenAI, completion
from tests.support.helpers import tether_cli
from tests.support.webserver import Served, serving

pytestmark = pytest.mark.slow


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    yield fake
    fake.close()


@pytest.fixture
def served(home: Path, model: FakeOpenAI) -> Iterator[Served]:
    (home / "settings.toml").write_text(
        f'[model]\nprovider = "vllm"\nmodel = "qwen2.5"\nbase_url = "{model.url}"\n', encoding="utf-8"
    )
    with serving(home, TETHER_MODEL_STREAM="0") as server:
        yield server


def test_the_trace_and_the_run_say_what_the_model_calls_cost(
    served: Served, model: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    model.reply(completion("The game is on."))  # usage: 11 in, 7 out
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 900})
            page: Any = context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(served.login)
            page.locator("[data-testid=live][data-state=live]").wait_for()
            send(page, "is the game on?")
            page.get_by_test_id("tab-trace").click()
            heading = page.get_by_test_id("trace-turn").first.get_by_test_id("turn-usage")
            heading.filter(has_text="1 model call · 11 in / 7 out tokens · ").wait_for()
            card = page.get_by_test_id("model-usage").first
            card.filter(has_text="gpt-4o-mini · 11 in / 7 out tokens").wait_for()
            shot(page, "usage-turn")

            # A goal run's agent task: its model call is the run's cost.
            model.reply(completion("Checked: the game is on."))
            flow = tmp_path / "flow.yaml"
            task = {"id": "check", "executor": "agent", "description": "check that the game is on"}
            flow.write_text(yaml.safe_dump({"caller": "cli", "tasks": [task]}), encoding="utf-8")
            code, out, err = tether_cli("flow", "run", str(flow), "--json", home=home, timeout=120)
            assert code in (0, 3), (out, err)  # (its agent ran no tool: a person may be asked)
            run = json.loads(out.strip().splitlines()[-1])
            assert run["usage"]["input_tokens"] == 11 and run["tasks"][0]["usage"]["output_tokens"] == 7, run
            page.get_by_test_id("tab-runs").click()
            page.get_by_test_id("run-item").first.click()  # the only run
            usage = page.get_by_test_id("run-usage")
            usage.filter(has_text="1 model call · 11 in / 7 out tokens · ").wait_for()
            shot(page, "usage-run")
        finally:
            browser.close()
