"""Chapter 3 in a real Chromium: the selected head drawn large (tokens on both axes, the looked-from row outlined,
the last token by default), every head in its key/value group, the labelled Q/K/V block, the legend per theme.

The expected numbers come from the API for the model that serves (SmolLM2 when its file is here, else the toy).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from pagekit import change, open_page

from inside_llm.api.demo_model import served_model
from inside_llm.scenes import scene_by_slug

pytestmark = pytest.mark.browser

PROMPT = "To be, or not to be, that is the"
MAP = "() => { const r = document.querySelector('#stage .ly-map-img').getBoundingClientRect(); return [r.width, r.height]; }"
ROW = """() => { const img = document.querySelector('#stage .ly-map-img'), row = document.querySelector('#stage .ly-map-row');
  return Math.round((+row.getAttribute('y') - +img.getAttribute('y')) / +row.getAttribute('height')); }"""


def api(page, base_url, **params) -> dict:
    q = "&".join(f"{k}={quote(str(v))}" for k, v in params.items())
    return page.request.get(f"{base_url}/api/layer?{q}").json()


def axis(page, which: str) -> list[str]:
    return page.locator(f"#stage text.ly-axis-{which}").all_text_contents()


def test_the_selected_head_is_drawn_large_with_every_token_on_both_axes(page, base_url):
    open_page(page, base_url + f"/tour/layer?prompt={quote(PROMPT)}&autoplay=0")
    d = api(page, base_url, prompt=PROMPT, layer=0)
    T = d["num_tokens"]
    w, h = page.evaluate(MAP)
    assert w >= 380 and h >= 380, f"the attention map is large at 1280 px ({w:.0f} x {h:.0f})"
    assert len(axis(page, "y")) == T and len(axis(page, "x")) == T, "a label per token on each axis"
    assert axis(page, "y")[-1] == axis(page, "x")[-1] == "·the"
    assert page.evaluate(ROW) == T - 1, "looking from the last token by default"
    assert page.locator("#stage text.ly-axis-y.sel").text_content() == "·the"
    assert f"token {T} of {T}" in page.locator("#stage .readout.ly-from").inner_text()
    # the outlined row's numbers are the head's real weights for the last token, in %
    values = [int(t) for t in page.locator("#stage text.ly-map-value").all_text_contents() if t]
    want = [round(100 * x) for x in d["heads"][0]["weights"][-1] if x >= 0.005]
    assert values == want
    assert sum(page.evaluate(MAP)) > 0 and "head 0" in page.locator("#stage .ly-attn h2").inner_text()


def test_heads_in_key_value_groups_and_a_click_draws_another_head_large(page, base_url):
    open_page(page, base_url + f"/tour/layer?prompt={quote(PROMPT)}&autoplay=0")
    d = api(page, base_url, prompt=PROMPT, layer=0)
    m = d["model"]
    assert page.locator("#stage g.ly-thumb").count() == m["n_heads"]
    assert page.locator("#stage rect.ly-group-box").count() == m["n_kv_heads"]
    labels = page.locator("#stage text.ly-group-label").all_text_contents()
    assert labels == [
        f"K/V head {g['kv_head']}: query heads {', '.join(map(str, g['query_heads']))}" for g in d["groups"]
    ]
    last = m["n_heads"] - 1
    before = page.evaluate("() => document.querySelector('#stage .ly-map-img').getAttribute('href')")
    change(page, lambda: page.locator(f"#stage g.ly-thumb[data-head='{last}']").click())
    assert f"head={last}" in page.url
    assert f"head {last}" in page.locator("#stage .ly-attn h2").inner_text()
    assert page.evaluate("() => document.querySelector('#stage .ly-map-img').getAttribute('href')") != before
    assert page.locator("#stage g.ly-thumb.selected").get_attribute("data-head") == str(last)
    # the Q/K/V block outlines this head's query columns and the key/value head it reads, in every block
    assert page.locator("#stage .ly-qkv rect.ly-head-sel").count() == 3
    kv = d["heads"][last]["kv_head"]
    nums = page.locator("#stage .ly-qkv text.ly-head-no.sel").all_text_contents()
    assert nums == [str(last), str(kv), str(kv)]


def test_the_qkv_block_says_what_rows_and_columns_are(page, base_url):
    page.set_viewport_size({"width": 1440, "height": 900})  # the desktop drawing: full block titles
    open_page(page, base_url + f"/tour/layer?prompt={quote(PROMPT)}&autoplay=0")
    m = api(page, base_url, prompt=PROMPT, layer=0)["model"]
    titles = " ".join(page.locator("#stage text.ly-block-title").all_text_contents())
    assert f"Query · {m['n_heads']} heads × {m['head_dim']}" in titles
    assert f"Key · {m['n_kv_heads']}" in titles and "Value" in titles
    assert page.locator("#stage .ly-qkv text.ly-head-no").count() == m["n_heads"] + 2 * m["n_kv_heads"]
    assert page.locator("#stage .ly-qkv text.ly-row-label").count() == api(page, base_url, prompt=PROMPT)["num_tokens"]
    assert f"{m['head_dim']} per head" in page.locator("#stage .ly-qkv svg").text_content()


@pytest.mark.parametrize(("theme", "word"), [("light", "darker"), ("dark", "brighter")])
def test_the_legend_says_what_more_weight_looks_like_in_each_theme(browser, base_url, theme, word):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme=theme)
    page = ctx.new_page()
    open_page(page, base_url + "/tour/layer?autoplay=0")
    legend = page.locator("#stage .ly-attn-legend")
    assert f"{word} = more weight" in legend.inner_text()
    assert legend.get_attribute("data-more") == word
    ctx.close()


def test_a_name_repeats_looks_from_the_last_token_where_its_point_shows(page, base_url):
    preset = next(
        p
        for p in scene_by_slug("layer").presets
        if p["name"]
        == ("A name repeats" if served_model("smollm2").served == "smollm2" else "Toy model: a name repeats")
    )
    open_page(page, base_url + "/tour/layer?autoplay=0")
    change(page, lambda: page.locator(f".preset:text-is('{preset['name']}')").click())
    p = preset["params"]
    d = api(page, base_url, prompt=p["prompt"], layer=p["layer"], model=p["model"])
    T, w = d["num_tokens"], d["heads"][p["head"]]["weights"][-1]
    assert page.evaluate(ROW) == T - 1
    # the head looks from the repeated name's last piece at the piece that followed it the first time
    seen = [j for j in range(1, T - 1) if d["tokens"][j - 1]["id"] == d["tokens"][-1]["id"]]
    top = max(range(T), key=lambda j: w[j])
    assert top in seen and w[top] >= 0.4
    first = page.locator("#stage text.ly-reading-token").first.text_content()
    assert first == axis(page, "x")[top]
    assert page.locator("#stage-status").inner_text() == ""


def test_focusing_a_token_moves_the_outlined_row_and_the_keys_move_it(page, base_url):
    open_page(page, base_url + "/tour/layer?prompt=To%20be%2C%20or%20not%20to%20be&autoplay=0")
    page.locator("#stage .ly-chip").nth(1).focus()
    assert page.evaluate(ROW) == 1
    assert page.locator("#stage text.ly-axis-y.sel").text_content() == "·be"
    masked = page.locator("#stage text.ly-axis-x.masked").count()
    assert masked == len(axis(page, "x")) - 2, "token 2 cannot see the tokens after it"
    page.keyboard.press("ArrowRight")
    assert page.evaluate("() => [...document.querySelectorAll('#stage .ly-chip')].indexOf(document.activeElement)") == 2
    assert page.evaluate(ROW) == 2
    page.locator("#stage .ly-chip").nth(0).hover()
    assert page.evaluate(ROW) == 0


def test_layer_slider_and_model_switch_stay_inside_the_model(page, base_url):
    toy = served_model("toy").model.config
    open_page(page, base_url + "/tour/layer?autoplay=0&layer=2")
    n = api(page, base_url, layer=0)["model"]["n_layers"]
    assert page.locator("#ctl-layer").get_attribute("max") == str(n - 1), "the slider ends at the model's last layer"
    before = page.evaluate("() => document.querySelector('#stage .ly-map-img').getAttribute('href')")
    change(
        page,
        lambda: page.evaluate(
            f"() => {{ const s = document.querySelector('#ctl-layer'); s.value = {n - 1}; "
            "s.dispatchEvent(new Event('input', {bubbles: true})); }"
        ),
    )
    assert (
        f"{n - 1}of {n}, counting from 0" in page.locator("#stage .readouts").inner_text()
        and f"layer={n - 1}" in page.url
    )
    assert page.evaluate("() => document.querySelector('#stage .ly-map-img').getAttribute('href')") != before
    change(page, lambda: page.select_option("#ctl-model", "toy"))
    assert f"{toy.n_layers - 1}of {toy.n_layers}, counting from 0" in page.locator("#stage .readouts").inner_text()
    assert page.locator("#ctl-layer").get_attribute("max") == str(toy.n_layers - 1)
    assert page.locator("#stage-status").inner_text() == ""
    assert page.locator("#stage g.ly-thumb").count() == toy.n_heads


def test_phone_width_keeps_the_map_large_and_no_sideways_scroll(phone, base_url):
    open_page(phone, base_url + "/tour/layer")
    shown = "() => [...document.querySelectorAll('#stage .ly-section.shown')].map(s => s.classList[1])"
    assert phone.evaluate(shown) == ["ly-qkv", "ly-attn", "ly-mlp"], "reduced motion: the whole layer at once"
    w, h = phone.evaluate(MAP)
    assert w >= 250 and h >= 250, f"the attention map on a phone: {w:.0f} x {h:.0f}"
    assert phone.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"), (
        "no sideways scroll at 390 px"
    )
    open_page(phone, base_url + "/tour/layer?step=0")
    phone.wait_for_function(f"() => JSON.stringify(({shown})()) === '[\"ly-qkv\"]'")


def test_typing_after_an_empty_prompt_draws_again(page, base_url):
    """An empty prompt clears the selected token; the next prompt looks from its last token."""
    open_page(page, base_url + "/tour/layer?prompt=")
    page.wait_for_function("() => document.querySelector('#stage')?.textContent.includes('Type a prompt')")
    page.locator("#ctl-prompt").type("To be", delay=10)
    page.wait_for_selector("#stage rect.ly-map-row")
    page.wait_for_function("() => document.querySelector('#stage .readout.ly-from .value')?.textContent.length > 0")
    assert page.evaluate(ROW) == len(axis(page, "y")) - 1
    assert page.locator("#stage-status").inner_text() == ""


def test_one_layer_numbering_and_the_attention_sink_named(page, base_url):
    """Layers are counted from 0 everywhere (slider, readout, stage, fact); a head that parks its attention on the
    first token is named an attention sink, with the share computed from the API's weights, and the heads of the
    same layer that look at content are listed."""
    layer = 20
    open_page(page, base_url + f"/tour/layer?prompt={quote(PROMPT)}&layer={layer}&autoplay=0")
    d = api(page, base_url, prompt=PROMPT, layer=layer)
    n = d["model"]["n_layers"]
    text = page.locator("main").inner_text()
    assert f"Layer {layer + 1} " not in text and "index " not in text, (
        "no 1-based layer label beside the 0-based slider"
    )
    readout = page.locator("#stage .readout").first.inner_text()
    assert str(layer) in readout and f"of {n}, counting from 0" in readout
    assert f"Layer {layer} (counting from zero)" in page.locator(".fact-text").inner_text()

    def share(h: int) -> float:
        rows = d["heads"][h]["weights"][1:]
        return sum(r[0] for r in rows) / len(rows)

    shares = [share(h) for h in range(d["model"]["n_heads"])]
    sinks = [h for h, s in enumerate(shares) if s > 0.5]
    assert sinks, "the test needs a layer with a sink head for this prompt"
    if sinks[0] != 0:  # head 0 is drawn large at first
        change(page, lambda: page.locator(f"#stage g.ly-thumb[data-head='{sinks[0]}']").click())
    note = page.locator("#stage .ly-sink-note")
    assert note.count() == 1
    assert float(note.get_attribute("data-sink-share")) == pytest.approx(shares[sinks[0]], abs=1e-3)
    words = note.inner_text()
    assert f"Head {sinks[0]} sends {round(100 * shares[sinks[0]])}%" in words and "attention sink" in words
    content = [h for h in range(len(shares)) if h not in sinks]
    if content:
        assert ", ".join(map(str, content)) in words
        change(page, lambda: page.locator(f"#stage g.ly-thumb[data-head='{content[0]}']").click())
        assert page.locator("#stage .ly-sink-note").count() == 0, "no sink note on a head that looks at content"
    assert page.locator("#stage text.ly-thumb-sink").count() == len(sinks)
