"""Browser fixtures: Debian's Chromium driven by Playwright (the live server, `base_url`, is in tests/conftest.py).

These tests never skip: without /usr/bin/chromium they fail and say how to install it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pagekit import unexpected_errors, watch_console

from inside_llm.headless import CHROMIUM, launch


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}. Install Debian's browser: "
            "`sudo apt-get install -y chromium` (or set INSIDE_LLM_CHROMIUM to its path).",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture()
def page(browser):
    """A 1280x860 page. Strict: the test fails when the page logged an error it did not allow."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    pg = watch_console(ctx.new_page())
    yield pg
    errors = unexpected_errors(pg)
    ctx.close()
    assert errors == [], f"console errors: {errors}"
