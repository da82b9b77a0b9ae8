"""The page of a home that shares its database with another home: the other home's jobs are shown with
their host and never acted on here (a stop or a log read says where the job runs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import tether_cli
from tests.support.webserver import Served, serving

SUPPORT = ("--registry", "tests.support.registry:registry")


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[Path, Served]]:
    database = tmp_path / "shared.db"
    a, b = tmp_path / "a", tmp_path / "b"
    for home in (a, b):
        home.mkdir()
        (home / "settings.toml").write_text(f'[store]\ndatabase_url = "sqlite:///{database}"\n')
    with serving(b, TETHER_REGISTRY="tests.support.registry:registry") as served:
        yield a, served


def test_another_homes_job_is_shown_with_its_host_and_never_stopped_here(shared: tuple[Path, Served]) -> None:
    a, served = shared
    code, out, err = tether_cli(*SUPPORT, "task", "run", "t.loops", "--detach", "--json", home=a)
    assert code == 0, err
    job = json.loads(out)["execution_id"]
    try:
        listed = {j["execution_id"]: j for j in served.get("/api/jobs")["items"]}
        assert listed[job]["data"]["elsewhere"]["host"], listed[job]
        stop = served.http.post(f"/api/jobs/{job}/stop")
        assert stop.status_code == 409 and "not in this home" in stop.json()["detail"]["message"], stop.text
        log = served.http.get(f"/api/jobs/{job}/log")
        assert log.status_code == 409 and "host" in log.json()["detail"]["message"], log.text
        code, out, _ = tether_cli(*SUPPORT, "job", "status", job, "--json", home=a)
        assert json.loads(out)["status"] == "running"  # untouched: its own home still runs it
    finally:
        tether_cli(*SUPPORT, "job", "stop", job, home=a)


def test_the_page_shows_another_homes_job_without_a_stop_button(shared: tuple[Path, Served]) -> None:
    from tests.interfaces.web.test_page import ARGS, CHROMIUM, WAIT_MS, playwright_sync, shot

    a, served = shared
    code, out, err = tether_cli(*SUPPORT, "task", "run", "t.loops", "--detach", "--json", home=a)
    assert code == 0, err
    job = json.loads(out)["execution_id"]
    try:
        with playwright_sync.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 900}).new_page()
                page.set_default_timeout(WAIT_MS)
                page.goto(served.login)
                page.get_by_test_id("tab-jobs").click()
                row = page.locator(f"[data-testid=job-row][data-job='{job}']")
                row.wait_for()
                assert row.get_attribute("data-elsewhere") == "true"
                assert "another tether home" in row.get_by_test_id("job-elsewhere").text_content()
                assert row.get_by_test_id("job-stop").count() == 0
                shot(page, "job-of-another-home")
            finally:
                browser.close()
    finally:
        tether_cli(*SUPPORT, "job", "stop", job, home=a)
