"""axe-core on every page, light and dark, wide and phone: no serious or critical WCAG 2.1 A/AA violations
anywhere on the page, the stage (each chapter's drawing) included: the header, navigation, narration,
"the number", controls, toolbar, cover and every scene's drawings, readouts and panels."""

from __future__ import annotations

import pytest
from pagekit import open_page, serious_violations, unexpected_errors, watch_console

from inside_llm.api.registry import CHAPTER_SLUGS

pytestmark = pytest.mark.browser
PAGES = ["/", "/dials"] + [f"/tour/{s}" for s in CHAPTER_SLUGS]


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("path", PAGES)
def test_no_serious_accessibility_violations(browser, base_url, path, theme):
    for width, height in ((1440, 900), (390, 844)):
        ctx = browser.new_context(viewport={"width": width, "height": height}, color_scheme=theme)
        page = watch_console(ctx.new_page())
        try:
            open_page(page, base_url + path)
            # chapter 4 opens with a 1.1 s lift (an aria-hidden overlay fading out): check the page it leaves
            page.wait_for_selector(".lift", state="detached")
            assert serious_violations(page) == [], f"{path} {theme} {width}px"
            assert unexpected_errors(page) == []
        finally:
            ctx.close()
