"""No layout shift while a page loads (issue 25): CLS from PerformanceObserver('layout-shift') at 1440x900 and 390x844.

A phone shows the stage first, and the stage holds the first screen from the start (theme.css), so the words under
it never jump when the picture draws (that shift was about 0.5 on every chapter at 390x844). Shifts inside a
stage (a late panel, a block that grows after the first draw) are each scene's own; the pages listed here are the
ones without any today. `make bench` (suite `pages`) prints every page's CLS against the 0.05 target.
"""

from __future__ import annotations

import pytest
from pagekit import rendered, unexpected_errors, watch_console

pytestmark = pytest.mark.browser

TARGET = 0.05
CLS = """window.__cls = 0; window.__shifts = [];
new PerformanceObserver((list) => { for (const e of list.getEntries()) if (!e.hadRecentInput) {
  window.__cls += e.value;
  window.__shifts.push([Math.round(e.startTime), e.value, (e.sources || []).map((s) => s.node?.className || s.node?.nodeName)]);
} }).observe({type: 'layout-shift', buffered: true});"""
PAGES = ["/", "/tour/embeddings", "/tour/layer", "/tour/parallelism"]
SIZES = [(1440, 900), (390, 844)]


@pytest.mark.parametrize("width, height", SIZES)
def test_pages_do_not_shift_while_they_load(browser, base_url, width, height):
    for path in PAGES:
        ctx = browser.new_context(viewport={"width": width, "height": height})
        page = watch_console(ctx.new_page())
        page.add_init_script(CLS)
        page.goto(base_url + path)
        rendered(page)
        page.wait_for_load_state("load")
        page.evaluate("() => new Promise((ok) => setTimeout(ok, 1500))")  # shifts right after the first draw count
        cls, shifts = page.evaluate("[window.__cls, window.__shifts]")
        errors = unexpected_errors(page)
        ctx.close()
        assert cls <= TARGET, f"{path} at {width}x{height}: CLS {cls:.3f} {shifts}"
        assert errors == []
