"""The tour in a real Chromium: keyboard walk, URL state, and chapter 1's chips."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from pagekit import retype

from inside_llm.api.registry import CHAPTER_SLUGS

pytestmark = pytest.mark.browser


def test_walk_all_eleven_steps_by_keyboard(page, base_url):
    page.goto(base_url + "/tour/tokens")
    for i, slug in enumerate(CHAPTER_SLUGS):
        page.wait_for_selector(f'#stage[data-slug="{slug}"]')
        assert page.locator('.steps a[aria-current="step"] b').inner_text() == str(i + 1)
        assert page.locator("#scene-title").inner_text()
        page.wait_for_function("() => document.querySelector('#stage')?.children.length > 0")
        if i + 1 < len(CHAPTER_SLUGS):
            page.locator("body").focus()
            page.keyboard.press("ArrowRight")
            page.wait_for_url(re.compile(f"/tour/{CHAPTER_SLUGS[i + 1]}$"))
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(re.compile(f"/tour/{CHAPTER_SLUGS[-2]}$"))
    assert page.console_errors == []


def test_typed_prompt_renders_chips_and_updates_url(page, base_url):
    page.goto(base_url + "/tour/tokens")
    retype(page, "#ctl-text", "Hello tokens 🦙")
    page.wait_for_function(
        "() => document.querySelectorAll('.chip').length >= 4 && "
        "[...document.querySelectorAll('.chip')].some(c => c.textContent.includes('tokens'))"
    )
    chips = page.locator(".chip")
    assert chips.count() >= 4
    assert page.locator(".chip.partial").count() >= 1, "emoji shown as bytes"
    page.wait_for_function("() => new URLSearchParams(location.search).get('q')?.startsWith('Hello tokens')")
    assert "Hello tokens" in parse_qs(urlparse(page.url).query)["q"][0], "typed text is the question (q)"
    readout = page.locator(".readouts").inner_text()
    assert re.search(r"\d+\s*tokens", readout)
    chips.first.focus()
    assert "id " in page.locator(".tooltip").inner_text()
    assert page.console_errors == []


def test_copied_url_reopens_the_same_state(page, base_url):
    page.goto(base_url + "/tour/tokens?text=state%20restored&encoding=llama3&view=chat&ws=1")
    page.wait_for_selector(".chip.special")
    assert page.locator("#ctl-encoding").input_value() == "llama3"
    assert page.locator("#ctl-view").input_value() == "chat"
    assert page.locator("#ctl-ws").is_checked()
    assert page.locator(".chip", has_text="<|begin_of_text|>").count() == 1


def test_latest_request_wins_while_typing(page, base_url):
    page.goto(base_url + "/tour/tokens")
    retype(page, "#ctl-text", "one two three four five six", delay=5)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.chip')].map(c => c.textContent).join('').includes('six')"
    )
    assert page.locator(".chip").count() == 6


def test_dials_full_page_is_not_a_tour_step(page, base_url):
    page.goto(base_url + "/dials")
    page.wait_for_selector("#stage")
    page.evaluate(
        "() => { window.leaving = false; addEventListener('beforeunload', () => { window.leaving = true; }); }"
    )
    page.locator("body").focus()
    page.keyboard.press("ArrowLeft")  # the handler runs during the press: a navigation would have begun
    assert page.evaluate("() => window.leaving") is False and page.url.endswith("/dials")


def test_scene_stylesheet_is_linked_in_the_head(client):
    html = client.get("/tour/dials").text
    head = html.split("</head>")[0]
    assert 'href="/static/css/scenes/dials.css"' in head


def test_a_slider_value_of_one_takes_a_singular_unit(page, base_url):
    page.goto(base_url + "/tour/roofline")
    page.wait_for_selector("html[data-rendered]")
    assert page.locator("#out-batch").inner_text() == "1 chat"
    page.evaluate(
        "() => { const s = document.querySelector('#ctl-batch'); s.value = 1; s.dispatchEvent(new Event('input', {bubbles: true})); }"
    )
    page.wait_for_function("() => document.querySelector('#out-batch').textContent === '2 chats'")
