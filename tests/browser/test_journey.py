"""The tour as one journey: "the number" follows each chapter's main control, and the control sits
beside the picture on a desktop and on a phone."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from pagekit import change, open_page

from inside_llm.scenes import scene_by_slug

pytestmark = pytest.mark.browser

# Each chapter's main control moved to a value that changes its fact (log2 sliders: the exponent).
MOVES = {
    "tokens": ("text", "one two three"),
    "embeddings": ("prompt", "Why is the sky blue?"),
    "layer": ("layer", 2),
    "gpu": ("gpu", "h200"),
    "roofline": ("batch", 6),
    "kv-cache": ("block_size", "64"),
    "batching": ("rate", 16),
    "quantization": ("precision", "fp8"),
    "speculative": ("alpha", 0.5),
    "parallelism": ("tp", "4"),
    "dials": ("batch", 6),
}


def move(page, slug: str) -> None:
    """Move the chapter's main control through its form element, as a visitor would."""
    name, value = MOVES[slug]
    c = next(c for c in scene_by_slug(slug).controls if c.name == name)
    el = page.locator(f"#ctl-{name}")
    if c.kind == "select":
        el.select_option(str(value))
    elif c.kind in ("text", "textarea"):
        el.fill(str(value))
    else:
        el.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input', { bubbles: true })); }", str(value))


def move_params(slug: str) -> dict[str, str]:
    """The moved control as the API reads it."""
    name, value = MOVES[slug]
    c = next(c for c in scene_by_slug(slug).controls if c.name == name)
    return {name: str(2 ** value if c.scale == "log2" else value)}


@pytest.mark.parametrize("slug", list(MOVES))
def test_the_number_follows_the_main_control(page, base_url, client, slug):
    open_page(page, f"{base_url}/tour/{slug}")
    box = page.locator("#fact .fact-text")
    before = box.inner_text()
    assert before == client.get(f"/api/facts/{slug}").json()["text"]
    expected = client.get(f"/api/facts/{slug}?{urlencode(move_params(slug))}").json()["text"]
    assert expected != before
    change(page, lambda: move(page, slug))
    page.wait_for_function("(t) => document.querySelector('#fact .fact-text').textContent === t", arg=expected)
