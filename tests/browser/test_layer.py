"""Chapter 3 in a real Chromium: attention heads grouped by KV head; a focused token's row lights up; the layer slider redraws."""

from __future__ import annotations

import pytest

from inside_llm.api.generate import demo_model

pytestmark = pytest.mark.browser


def heat_rows_y(page) -> list[float]:
    return page.evaluate("() => [...document.querySelectorAll('#stage rect.ly-heat-sel')].map(r => +r.getAttribute('y'))")


def test_heads_are_drawn_in_kv_groups(page, base_url):
    c = demo_model().config
    page.goto(base_url + "/tour/layer")
    page.wait_for_selector("#stage rect.ly-heat-sel")
    assert page.locator("#stage rect.ly-heat-sel").count() == c.n_heads
    assert page.locator("#stage rect.ly-group-box").count() == c.n_kv_heads
    labels = page.locator("#stage text.ly-group-label").all_text_contents()
    assert labels and all("KV" in t for t in labels)
    assert page.locator("#stage .ly-attends-head").count() == c.n_heads
    svg_text = " ".join(page.locator("#stage text.ly-block-title").all_text_contents())
    assert "Query" in svg_text and "Key" in svg_text and "Value" in svg_text
    assert page.console_errors == []


def test_focusing_a_token_highlights_its_attention_row(page, base_url):
    page.goto(base_url + "/tour/layer?prompt=To%20be%2C%20or%20not%20to%20be&autoplay=0")
    page.wait_for_selector("#stage .ly-chip")
    last = heat_rows_y(page)
    page.locator("#stage .ly-chip").nth(1).focus()
    second = heat_rows_y(page)
    assert all(a > b for a, b in zip(last, second, strict=True)), "the highlighted row moved up to token 2"
    row = page.locator("#stage .ly-attends-line").first.locator(".ly-att")
    assert "future" not in row.nth(0).get_attribute("class") and "future" not in row.nth(1).get_attribute("class")
    assert "future" in row.nth(2).get_attribute("class"), "token 2 cannot see token 3"
    assert row.nth(0).evaluate("e => e.style.background").startswith("color-mix")
    assert "be" in page.locator("#stage .readout.ly-from .value").inner_text()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("() => [...document.querySelectorAll('#stage .ly-chip')].indexOf(document.activeElement)") == 2
    page.locator("#stage .ly-chip").nth(0).hover()
    assert heat_rows_y(page)[0] < second[0]
    assert page.console_errors == []


def test_layer_slider_changes_the_drawing(page, base_url):
    n = demo_model().config.n_layers
    page.goto(base_url + "/tour/layer?autoplay=0")
    page.wait_for_selector("#stage rect.ly-heat-sel")
    before = page.evaluate("() => document.querySelector('#stage .ly-attn image').getAttribute('href')")
    page.evaluate(f"() => {{ const s = document.querySelector('#ctl-layer'); s.value = {n - 1}; "
                  "s.dispatchEvent(new Event('input', {bubbles: true})); }")
    page.wait_for_function(f"() => document.querySelector('#stage .readouts')?.innerText.includes('{n} of {n}')")
    after = page.evaluate("() => document.querySelector('#stage .ly-attn image').getAttribute('href')")
    assert before != after
    assert f"layer={n - 1}" in page.url
    assert page.console_errors == []


def test_steps_reduced_motion_and_phone_width(browser, base_url):
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, reduced_motion="reduce")
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    shown = "() => [...document.querySelectorAll('#stage .ly-section.shown')].map(s => s.classList[1])"
    page.goto(base_url + "/tour/layer")
    page.wait_for_selector("#stage rect.ly-heat-sel")
    assert page.evaluate(shown) == ["ly-qkv", "ly-attn", "ly-mlp"], "reduced motion: the whole layer at once"
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"), "no sideways scroll at 390 px"
    page.goto(base_url + "/tour/layer?step=0")
    page.wait_for_selector("#stage rect.ly-heat-sel")
    page.wait_for_timeout(200)
    assert page.evaluate(shown) == ["ly-qkv"]
    assert errors == []
    ctx.close()


def test_typing_after_an_empty_prompt_draws_again(page, base_url):
    """An empty prompt clears the selected token; the next prompt selects its last token's attention row."""
    page.goto(base_url + "/tour/layer?prompt=")
    page.wait_for_function("() => document.querySelector('#stage')?.textContent.includes('Type a prompt')")
    page.locator("#ctl-prompt").type("To be", delay=10)
    page.wait_for_selector("#stage rect.ly-heat-sel")
    page.wait_for_function("() => document.querySelector('#stage .readout.ly-from .value')?.textContent.length > 0")
    assert page.locator("#stage-status").inner_text() == ""
    assert page.console_errors == []
