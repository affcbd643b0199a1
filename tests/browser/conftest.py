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


def _strict_page(browser, **context):
    """A page in a fresh context; after the test, fails it when the page logged an error it did not allow
    (patterns in page.allowed_errors)."""
    ctx = browser.new_context(**context)
    pg = watch_console(ctx.new_page())
    yield pg
    errors = unexpected_errors(pg)
    ctx.close()
    assert errors == [], f"console errors: {errors}"


@pytest.fixture()
def page(browser):
    """A 1280x860 page. Strict: the test fails when the page logged an error it did not allow."""
    yield from _strict_page(browser, viewport={"width": 1280, "height": 860})


@pytest.fixture()
def phone(browser):
    """A 390x844 page that asks for reduced motion (the still picture on a phone). Strict, as `page`."""
    yield from _strict_page(browser, viewport={"width": 390, "height": 844}, reduced_motion="reduce")
