"""No layout shift while a page loads (issue 25): CLS from PerformanceObserver('layout-shift') in session
windows, as browsers report it (inside_llm.headless.LAYOUT_SHIFT_JS), on every page (the cover, the eleven
chapters, /dials) at 1440x900, 1024x768 and 390x844, against the issue's bound of 0.05.

What keeps it there (theme.css, controller.js): the stage paints nothing of its skeleton until the first draw
(a hidden box that moves is no shift); on a phone the stage holds the first screen from the start, so the words
under it never jump; at the medium layout the controls sit under the words, beside the stage, which alone grows; the page's own part fills the first screen, so the footer starts below it and a stage that
grows moves nothing in view. Shifts inside a stage after its first draw (a measured panel filling in, a step of
the animation) are each scene's own and count here too: the page is watched until every "Measured on this
server" panel has answered (and chapter 7's own, and chapter 11's chat), then for WATCH_MS more. A layout
metric, not a timing one: a slower machine only draws fewer animation steps inside the window. `make bench` (suite `pages`) prints the same figure per page.
"""

from __future__ import annotations

import pytest
from pagekit import rendered, unexpected_errors, watch_console

from inside_llm.api.registry import CHAPTER_SLUGS
from inside_llm.headless import LAYOUT_SHIFT_JS

pytestmark = pytest.mark.browser

TARGET = 0.05
WATCH_MS = 1500  # after the page settled: shifts right after the first draw and the first steps count
PAGES = ["/"] + [f"/tour/{slug}" for slug in CHAPTER_SLUGS] + ["/dials"]
SIZES = [(1440, 900), (1024, 768), (390, 844)]  # wide, medium (the rail under the words), phone
# what fills in after the first draw, awaited before the watch (its growth must not shift the page either): every
# "Measured on this server" panel answered; chapter 7's own measured bars; chapter 11's chat answer written out
PENDING = "() => !document.querySelector('[data-measured=\"pending\"]')"
CHAT_DONE = "() => /^([\\d,]+) of \\1 tokens/.test(document.querySelector('.chat-foot')?.textContent || '')"
SETTLED = {
    "/tour/batching": "() => document.querySelectorAll('.bt-measured .bt-bar').length >= 3 || "
    "document.querySelector('.bt-measured')?.textContent.includes('Not measured')",
    "/tour/dials": CHAT_DONE,
    "/dials": CHAT_DONE,
}


@pytest.mark.parametrize("width, height", SIZES, ids=["1440x900", "1024x768", "390x844"])
@pytest.mark.parametrize("path", PAGES)
def test_page_does_not_shift_while_it_loads(browser, base_url, path, width, height):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = watch_console(ctx.new_page())
        page.add_init_script(LAYOUT_SHIFT_JS)
        page.goto(base_url + path)
        rendered(page)
        page.wait_for_load_state("load")
        page.wait_for_function(PENDING, timeout=180_000)
        if path in SETTLED:
            page.wait_for_function(SETTLED[path], timeout=180_000)
        page.evaluate(f"() => new Promise((ok) => setTimeout(ok, {WATCH_MS}))")
        cls, shifts = page.evaluate("[window.__cls, window.__shifts]")
        errors = unexpected_errors(page)
    finally:
        ctx.close()
    assert cls <= TARGET, f"{path} at {width}x{height}: CLS {cls:.3f}; shifts [ms, value, what moved]: {shifts}"
    assert errors == []


# The parts of the page in the order they stand on screen, as the markup has them: a loaded machine paints a page
# while it still parses, so a part that CSS lifts above one already painted moves that one down when it arrives. CI
# once caught /dials at 390x844 at CLS 0.096 so (its words painted, then the stage a phone shows above them arrived);
# an idle machine parses the page in one go and never shows it, so this checks the cause, not a timing.
ORDER_JS = """() => {
  const parts = [];
  const walk = (el) => { for (const c of el.children) {
    const cs = getComputedStyle(c);
    if (cs.display === 'contents') { walk(c); continue; }
    if (cs.display === 'none' || cs.position === 'fixed' || cs.position === 'absolute' || c.tagName === 'SCRIPT') continue;
    const r = c.getBoundingClientRect(); if (!r.height) continue;
    parts.push([c.tagName.toLowerCase() + (c.className ? '.' + String(c.className).trim().split(/\\s+/).join('.') : ''),
      Math.round(r.top + scrollY), Math.round(r.left)]);
  } };
  walk(document.querySelector('main')); return parts; }"""


@pytest.mark.parametrize("width, height", SIZES, ids=["1440x900", "1024x768", "390x844"])
@pytest.mark.parametrize("path", PAGES)
def test_parts_stand_in_markup_order(browser, base_url, path, width, height):
    ctx = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = ctx.new_page()
        page.goto(base_url + path)
        rendered(page)
        parts = page.evaluate(ORDER_JS)
    finally:
        ctx.close()
    assert len(parts) >= 2, f"{path}: {parts}"
    # each part starts no higher than the one before it, unless it stands beside it (a column to its right)
    for (a, top_a, left_a), (b, top_b, left_b) in zip(parts, parts[1:]):
        assert top_b >= top_a or left_b > left_a, (
            f"{path} at {width}x{height}: {b} (top {top_b}) stands above {a} (top {top_a}), before it in the markup: {parts}"
        )
