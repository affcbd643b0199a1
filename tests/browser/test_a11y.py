"""axe-core on every page, light and dark: no serious or critical WCAG 2.1 A/AA violations in the page's
own chrome (header, navigation, narration, "the number", controls, toolbar, cover).

The stage (each chapter's drawing) is excluded here: its scene modules are checked by their own tests."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe
from pagekit import open_page, unexpected_errors, watch_console

from inside_llm.api.registry import CHAPTER_SLUGS

pytestmark = pytest.mark.browser
PAGES = ["/", "/dials"] + [f"/tour/{s}" for s in CHAPTER_SLUGS]
RULES = {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}


@pytest.fixture(scope="module")
def axe():
    return Axe()


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("path", PAGES)
def test_no_serious_accessibility_violations(browser, base_url, axe, path, theme):
    for width, height in ((1440, 900), (390, 844)):
        ctx = browser.new_context(viewport={"width": width, "height": height}, color_scheme=theme)
        page = watch_console(ctx.new_page())
        try:
            open_page(page, base_url + path)
            result = axe.run(page, context={"exclude": [["#stage"]]},
                             options={"resultTypes": ["violations"], "runOnly": RULES})
            bad = [f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes'][:3]]}"
                   for v in result.response["violations"] if v["impact"] in ("serious", "critical")]
            assert bad == [], f"{path} {theme} {width}px"
            assert unexpected_errors(page) == []
        finally:
            ctx.close()
