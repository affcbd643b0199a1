"""Chapter 10 in Chromium: the HGX board draws, pulses travel, controls redraw the split, no console errors."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.browser


def test_board_draws_eight_gpus_four_switches_and_traffic(page, base_url):
    page.goto(base_url + "/tour/parallelism")
    page.wait_for_selector(".par-svg .gpu-box")
    assert page.locator(".par-svg .gpu").count() == 8
    assert page.locator(".par-svg .switch").count() == 4
    assert page.locator(".par-svg .link").count() == 32
    page.wait_for_function("() => document.querySelectorAll('.par-svg .pulse.tp[visibility=\"visible\"]').length > 0",
                           timeout=8000)
    readouts = page.locator(".readouts").inner_text()
    assert re.search(r"WEIGHTS PER GPU\s*17\.6", readouts, re.I) and "yes" in readouts
    assert "Tensor parallel ×8" in page.locator(".par-cards").inner_text()
    assert page.console_errors == []


def test_pipeline_control_draws_stages_and_bubbles(page, base_url):
    page.goto(base_url + "/tour/parallelism")
    page.wait_for_selector(".par-svg .gpu-box")
    page.select_option("#ctl-tp", "1")
    page.select_option("#ctl-pp", "8")
    page.wait_for_selector(".tl-svg .cell.idle")
    assert "pp=8" in page.url and "tp=1" in page.url
    assert page.locator(".tl-svg .cell.busy").count() == 8 * 8 + 1          # 64 cells + the legend swatch
    assert page.locator(".tl-svg .cell.idle").count() == 7 * 8 + 1          # the bubble + the legend swatch
    assert "layers 1–10" in page.locator(".par-board").inner_text()
    assert "47%" in page.locator(".readouts").inner_text()
    page.wait_for_function("() => document.querySelectorAll('.par-svg .pulse.pp[visibility=\"visible\"]').length > 0",
                           timeout=8000)
    assert page.console_errors == []


def test_one_gpu_does_not_fit_and_an_invalid_split_says_why(page, base_url):
    page.goto(base_url + "/tour/parallelism?tp=1&pp=1&gpus=1")
    page.wait_for_selector(".par-svg .gpu-box")
    assert "no" in page.locator(".readout.bad").inner_text()
    assert page.locator(".par-svg .gpu.unused").count() == 7
    assert page.locator(".par-svg .mem.over").count() == 1
    page.select_option("#ctl-pp", "2")
    page.wait_for_function("() => document.querySelector('#stage-status')?.textContent.includes('divide')")
    assert page.console_errors == [] or all("422" in e for e in page.console_errors)


def test_still_picture_for_reduced_motion(browser, base_url):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, reduced_motion="reduce")
    pg = ctx.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(base_url + "/tour/parallelism?tp=4&pp=2&micro_batches=4")
    pg.wait_for_selector(".tl-svg .cell.busy")
    assert pg.locator(".par-svg.narrow").count() == 1
    assert pg.locator(".par-svg .pulse.tp[visibility='visible']").count() > 0   # traffic drawn, not animated
    assert pg.locator(".par-caption").inner_text()
    assert errors == []
    ctx.close()
