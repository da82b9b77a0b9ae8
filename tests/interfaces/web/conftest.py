"""The browser the page tests drive (one per test module): Debian's chromium through Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.interfaces.web.browsing import ARGS, require_chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright_sync = pytest.importorskip("playwright.sync_api")
    executable = require_chromium()
    with playwright_sync.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=ARGS)
        yield launched
        launched.close()
