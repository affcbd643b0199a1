"""Chapter 4 in a real Chromium: the package drawing has the GPU's real SM count, weights stream, GPU switch redraws."""

from __future__ import annotations

import re

import pytest

from inside_llm.sim import catalog

pytestmark = pytest.mark.browser

SM = "#stage .gpu-svg g.sm"


def sm_count(page, n):
    page.wait_for_function(f"() => document.querySelectorAll('{SM}').length === {n}")
    return page.locator(SM).count()


def test_h100_draws_132_sms_with_four_tensor_cores_and_streams_tiles(page, base_url):
    page.goto(base_url + "/tour/gpu")
    assert sm_count(page, catalog.gpu("h100-sxm").sm_count) == 132
    assert page.locator(f"{SM} rect.tc").count() == 132 * 4
    assert page.locator("#stage rect.gpu-hbm:not(.inactive)").count() == 5
    assert page.locator("#stage rect.gpu-hbm.inactive").count() == 1
    assert page.locator("#stage rect.gpu-l2").count() == 2
    readouts = page.locator("#stage .readouts").inner_text()
    assert re.search(r"17\.4\s*GB", readouts) and re.search(r"11\.5\s*ms", readouts)
    assert re.search(r"Slowed [\d,]+×", page.locator("#stage .gpu-speed").inner_text())
    # Tiles move: the same tile element is somewhere else a moment later.
    page.wait_for_function("() => [...document.querySelectorAll('#stage rect.tile')].some(t => t.getAttribute('visibility') === 'visible')")
    before = page.evaluate("() => [...document.querySelectorAll('#stage rect.tile')].map(t => t.getAttribute('transform')).join('|')")
    page.wait_for_timeout(250)
    after = page.evaluate("() => [...document.querySelectorAll('#stage rect.tile')].map(t => t.getAttribute('transform')).join('|')")
    assert before != after
    assert page.console_errors == []


def test_switching_gpu_redraws_its_real_layout(page, base_url):
    page.goto(base_url + "/tour/gpu")
    sm_count(page, 132)
    for gid in ("b200", "mi300x", "h200"):
        g = catalog.gpu(gid)
        page.select_option("#ctl-gpu", gid)
        assert sm_count(page, g.sm_count) == g.sm_count
        assert page.locator("#stage rect.gpu-hbm:not(.inactive)").count() == g.hbm_stacks
        assert f"gpu={gid}" in page.url
    assert page.locator("#stage rect.gpu-hbm.inactive").count() == 0  # H200: all six sites hold stacks
    assert page.console_errors == []


def test_phone_width_and_reduced_motion_keep_the_numbers(browser, base_url):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, reduced_motion="reduce")
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(base_url + "/tour/gpu?gpu=mi300x")
    sm_count(page, 304)
    assert page.locator("#stage .gpu-svg.gpu-narrow").count() == 1
    text = page.locator("#stage .gpu-clock-text").inner_text()
    assert text.startswith("One step:") and "GB" in text and "ms" in text
    first = page.evaluate("() => [...document.querySelectorAll('#stage rect.tile')].map(t => t.getAttribute('transform')).join('|')")
    page.wait_for_timeout(300)
    assert page.evaluate("() => [...document.querySelectorAll('#stage rect.tile')].map(t => t.getAttribute('transform')).join('|')") == first
    assert errors == []
    ctx.close()
