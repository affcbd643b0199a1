"""Presenter mode: the stage fills the window; arrows step the animation, then move scene to scene."""

from __future__ import annotations

import re

import pytest
from pagekit import change, rendered, settled
from stepping_scene import NUM_STEPS, use_stepping_scene

pytestmark = pytest.mark.browser

FILLS = """() => {
  const r = document.getElementById('stage').getBoundingClientRect();
  const hidden = ['.site-header', '.narration', '.site-footer', '.stage-tools', '#controls']
    .every((s) => !document.querySelector(s) || getComputedStyle(document.querySelector(s)).display === 'none');
  return {w: r.width / innerWidth, h: r.height / innerHeight, hidden,
          presenting: document.body.classList.contains('presenting'),
          hud: !!document.querySelector('.presenter-hud')};
}"""


def shown(page) -> list[int]:
    return page.evaluate("window.__stepping ? window.__stepping.shown : []")


def test_present_param_opens_full_window_stage(page, base_url):
    page.goto(f"{base_url}/tour/tokens?present=1")
    page.wait_for_selector(".chip")
    page.wait_for_selector(".presenter-hud")
    m = page.evaluate(FILLS)
    assert m["presenting"] and m["hud"] and m["hidden"]
    assert m["w"] > 0.95 and m["h"] > 0.85, m
    for btn in page.locator(".presenter-hud button").all():
        assert btn.get_attribute("aria-label"), "every presenter button is labelled"
    assert "1/11" in page.locator(".presenter-label").inner_text()
    assert page.console_errors == []


def test_arrows_step_inside_the_scene_then_move_to_the_next(page, base_url):
    use_stepping_scene(page)
    page.goto(f"{base_url}/tour/tokens?present=1")
    page.wait_for_function("() => window.__stepping?.shown.length > 0")
    assert shown(page) == [0], "presenting a stepping scene starts at its first step"
    for i in range(1, NUM_STEPS):
        page.keyboard.press("ArrowRight")
        page.wait_for_url(re.compile(f"step={i}"))
    assert shown(page)[-1] == NUM_STEPS - 1
    assert f"step {NUM_STEPS} of {NUM_STEPS}" in page.locator(".presenter-label").inner_text()
    page.keyboard.press("ArrowRight")  # past the last step: the next scene, in place
    page.wait_for_url(re.compile(r"/tour/embeddings\?.*present=1"))
    page.wait_for_selector('#stage[data-slug="embeddings"]')
    page.wait_for_function("() => document.querySelector('#stage')?.children.length > 0")
    assert page.evaluate(FILLS)["presenting"], "still presenting (full screen survives the move)"
    assert "2/11" in page.locator(".presenter-label").inner_text()
    page.keyboard.press("ArrowLeft")  # back: the previous scene at its last step
    page.wait_for_url(re.compile(r"/tour/tokens\?.*present=1"))
    page.wait_for_function(f"() => window.__stepping?.shown.at(-1) === {NUM_STEPS - 1}")
    page.keyboard.press("ArrowLeft")
    page.wait_for_function(f"() => window.__stepping?.shown.at(-1) === {NUM_STEPS - 2}")


def test_escape_leaves_presenter_mode(page, base_url):
    page.goto(f"{base_url}/tour/tokens?present=1&encoding=llama3")
    page.wait_for_selector(".presenter-hud")
    page.keyboard.press("Escape")
    page.wait_for_function("() => !document.body.classList.contains('presenting')")
    assert "present" not in page.url and "encoding=llama3" in page.url
    assert page.locator(".narration").is_visible() and page.locator("#controls").is_visible()
    assert page.locator(".presenter-hud").count() == 0


def test_escape_after_moving_scenes_reopens_that_scene_in_the_tour(page, base_url):
    page.goto(f"{base_url}/tour/tokens?present=1")
    page.wait_for_selector(".chip")
    page.keyboard.press("ArrowRight")  # chapter 1 has no steps: straight to chapter 2
    page.wait_for_selector('#stage[data-slug="embeddings"]')
    page.keyboard.press("Escape")
    page.wait_for_url(re.compile(r"/tour/embeddings(\?step=0)?$"))  # step 0 when its data had landed
    page.wait_for_selector("#scene-title")
    assert page.locator(".steps a[aria-current=step] b").inner_text() == "2"


def test_present_button_and_p_key_open_it(page, base_url):
    page.goto(f"{base_url}/tour/tokens")
    page.wait_for_selector(".chip")
    page.get_by_role("button", name=re.compile("^Present")).click()
    page.wait_for_selector(".presenter-hud")
    assert "present=1" in page.url
    page.get_by_role("button", name=re.compile("Leave presenter")).click()
    page.wait_for_function("() => !document.querySelector('.presenter-hud')")
    page.locator("body").focus()
    page.keyboard.press("p")
    page.wait_for_selector(".presenter-hud")
    assert page.console_errors == []


def test_shift_arrow_skips_scenes_and_home_end_jump_steps(page, base_url):
    use_stepping_scene(page)
    page.goto(f"{base_url}/tour/tokens?present=1")
    page.wait_for_function("() => window.__stepping?.shown.length > 0")
    page.keyboard.press("End")
    page.wait_for_url(re.compile(f"step={NUM_STEPS - 1}"))
    page.keyboard.press("Home")
    page.wait_for_url(re.compile(r"step=0"))
    page.keyboard.press("Shift+ArrowRight")
    page.wait_for_selector('#stage[data-slug="embeddings"]')
    assert page.evaluate(FILLS)["presenting"]


def test_presenter_fits_each_step_not_the_tallest(page, base_url):
    """Chapter 3's first step shows one section: it is fitted to that, so its type is larger than at the last."""
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(f"{base_url}/tour/layer?present=1&step=0")
    rendered(page)
    font = "() => parseFloat(getComputedStyle(document.documentElement).fontSize)"
    page.wait_for_function("() => document.documentElement.classList.contains('fit')")
    first = settled(page, font)
    change(page, lambda: page.keyboard.press("End"))
    last = settled(page, font)
    assert first > 1.2 * last, f"step 1 at {first:.1f}px, last step at {last:.1f}px"


@pytest.mark.parametrize(
    ("slug", "keeps", "grows"), [("speculative", ".sp-chart", 1.05), ("dials", ".dials-chat", 1.0)]
)
def test_size_xl_is_bigger_type_in_the_same_layout(page, base_url, slug, keeps, grows):
    """size=xl: the type grows as far as the frame allows (dials already fills a 16:9 frame at m), and the
    layout stays: the content keeps the stage's width and no block is dropped."""
    page.set_viewport_size({"width": 1280, "height": 720})
    sizes, widths = {}, {}
    for size in ("m", "xl"):
        page.goto(f"{base_url}/embed/{slug}?size={size}&autoplay=0")
        rendered(page)
        sizes[size] = settled(page, "() => parseFloat(getComputedStyle(document.documentElement).fontSize)")
        widths[size] = page.evaluate("() => document.querySelector('#stage > *').getBoundingClientRect().width")
        assert page.locator(f"#stage {keeps}").first.is_visible(), f"{slug} size={size} keeps {keeps}"
    assert sizes["xl"] >= grows * sizes["m"] - 0.05 and widths["xl"] >= 0.97 * widths["m"]


def test_escape_clears_present_and_step_and_the_title_follows_the_chapter(page, base_url):
    page.goto(f"{base_url}/tour/roofline?present=1&step=1")
    page.wait_for_selector(".presenter-hud")
    assert page.title().startswith("5. ")
    page.keyboard.press("Shift+ArrowRight")  # to chapter 6 in place
    page.wait_for_selector('#stage[data-slug="kv-cache"]')
    page.wait_for_function("() => document.title.startsWith('6. ')")
    page.keyboard.press("Escape")
    page.wait_for_url(re.compile(r"/tour/kv-cache$"))
    page.wait_for_selector("#scene-title")
    assert page.title().startswith("6. ")


def test_escape_in_the_same_scene_leaves_no_present_or_step(page, base_url):
    page.goto(f"{base_url}/tour/roofline?present=1&step=1")
    page.wait_for_selector(".presenter-hud")
    page.keyboard.press("Escape")
    page.wait_for_function("() => !document.body.classList.contains('presenting')")
    assert "present=" not in page.url and "step=" not in page.url
