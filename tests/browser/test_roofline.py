"""Chapter 5 in a real Chromium: the roofline draws, the decode point climbs as the batch grows."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

DOT = "#stage circle.rf-point.decode"


def point(page):
    return page.evaluate(f"() => {{ const c = document.querySelector('{DOT}'); return [+c.getAttribute('cx'), +c.getAttribute('cy')]; }}")


def settle(page, batch):
    page.wait_for_function(f"() => document.querySelector('{DOT}')?.getAttribute('aria-valuenow') === '{batch}'")
    page.wait_for_timeout(600)  # the tween between positions


def test_roofline_draws_roofs_ridge_and_points(page, base_url):
    page.goto(base_url + "/tour/roofline")
    settle(page, 1)
    svg = page.locator("#stage svg.roofline-svg")
    assert svg.locator("line.rf-roof.memory").count() == 1 and svg.locator("line.rf-roof.compute").count() == 1
    assert "ridge · 295 FLOP/byte" in svg.locator("text.rf-ridge-label").text_content()
    titles = " ".join(svg.locator("text.rf-axis-title").all_text_contents())
    assert "FLOP" in titles and "byte" in titles and "TFLOP/s" in titles
    assert svg.locator("circle.rf-curve-dot").count() == 11  # batch 1 .. 1024
    readouts = page.locator("#stage .readouts").inner_text()
    assert "0.16%" in readouts and "Memory" in readouts
    assert page.console_errors == []


def test_batch_slider_moves_the_decode_point_up_the_slope(page, base_url):
    page.goto(base_url + "/tour/roofline")
    settle(page, 1)
    x1, y1 = point(page)
    page.evaluate("() => { const s = document.querySelector('#ctl-batch'); s.value = 6; s.dispatchEvent(new Event('input', {bubbles: true})); }")
    settle(page, 64)
    x64, y64 = point(page)
    assert x64 > x1 and y64 < y1  # right (more FLOP/byte) and up (more FLOP/s; SVG y grows downward)
    assert "batch=64" in page.url
    share = page.locator("#stage .readout.share .value").inner_text()
    assert float(share.split("%")[0]) > 1
    assert page.console_errors == []


def test_keyboard_on_the_point_changes_the_batch(page, base_url):
    page.goto(base_url + "/tour/roofline?batch=8")
    settle(page, 8)
    page.locator(DOT).focus()
    page.keyboard.press("ArrowRight")
    settle(page, 16)
    assert "/tour/roofline" in page.url and "batch=16" in page.url
    assert page.console_errors == []
