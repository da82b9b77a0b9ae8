"""The "live" mark says live only while the server answers: a server that stops answering (frozen, its
event stream stalled) or is gone turns it to a not-live state within a few heartbeats, and it says live
again once the server answers (thawed, or started again). The server pings every second here
(``TETHER_WEB_HEARTBEAT_S``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.interfaces.web.browsing import PHONE, Opened, require_chromium, shot
from tests.support.webserver import serving

pytestmark = pytest.mark.slow
require_chromium()
NOT_LIVE_WITHIN_MS = 15_000  # three missed pings of a second, and the slack of a loaded machine
STATE = "document.querySelector('[data-testid=live]').dataset.state"


@pytest.mark.parametrize(("lang", "viewport"), [("en", None), ("zh", PHONE)], ids=["en-desktop", "zh-phone"])
def test_the_live_mark_leaves_live_when_the_server_stops_answering_and_comes_back(
    browser: Any, home: Path, lang: str, viewport: dict[str, int] | None
) -> None:
    width = (viewport or {"width": 1400})["width"]
    with serving(home, TETHER_WEB_HEARTBEAT_S="1") as served:
        opened = Opened(browser, served, lang=lang, viewport=viewport)
        page = opened.page
        os.kill(served.proc.pid, signal.SIGSTOP)  # the server is there, and answers nothing
        try:
            page.wait_for_function(f"() => {STATE} !== 'live'", timeout=NOT_LIVE_WITHIN_MS)
            shot(page, f"live-not-answering-{lang}-{width}")
            assert page.get_by_test_id("live").inner_text().strip() in ("not answering", "服务器无响应")
        finally:
            os.kill(served.proc.pid, signal.SIGCONT)
        page.wait_for_function(f"() => {STATE} === 'live'", timeout=30_000)
        served.stop()  # gone
        page.wait_for_function(f"() => {STATE} !== 'live'", timeout=NOT_LIVE_WITHIN_MS)
        shot(page, f"live-server-gone-{lang}-{width}")
        # Started again (same home, so the same token; same port): the page is live again by itself.
        with serving(home, "--port", str(served.port), TETHER_WEB_HEARTBEAT_S="1"):
            page.wait_for_function(f"() => {STATE} === 'live'", timeout=60_000)
        opened.close()
