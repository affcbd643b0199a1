"""Chapter 2 in a real Chromium: the prompt's vectors rise floor by floor (every floor of the toy, a handful of
SmolLM2's, and the page says which); labels a newcomer can read; the legend says how colours are scaled.

Expected counts come from the API for the model that serves (SmolLM2 when its file is here, else the toy).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from pagekit import change, open_page, retype

from inside_llm.api.demo_model import served_model

pytestmark = pytest.mark.browser

SHOWN = "() => document.querySelectorAll('#stage g.emb-floor.shown').length"


def wide(page):
    """A 1440x900 window: the stage is wide enough for the desktop drawing (floor names, ranges, the lens column)."""
    page.set_viewport_size({"width": 1440, "height": 900})


def api(page, base_url, **params) -> dict:
    q = "&".join(f"{k}={quote(str(v))}" for k, v in params.items())
    return page.request.get(f"{base_url}/api/embeddings?{q}").json()


def test_typed_prompt_draws_one_column_per_token_and_the_drawn_floors(page, base_url):
    wide(page)
    open_page(page, base_url + "/tour/embeddings?autoplay=0")  # the drawing, not the rise's timing (tested below)
    retype(page, "#ctl-prompt", "Juliet is the sun")
    d = api(page, base_url, prompt="Juliet is the sun")
    n, drawn = d["num_tokens"], d["drawn_floors"]
    page.wait_for_function(f"() => document.querySelectorAll('#stage .emb-token').length === {n}")
    assert page.locator("#stage g.emb-floor").count() == len(drawn)
    assert page.locator("#stage g.emb-floor image.strip-img").count() == len(drawn)
    labels = page.evaluate(
        "() => [...document.querySelectorAll('#stage text.emb-floor-label')]"
        ".map(t => [+t.getAttribute('y'), t.textContent]).sort((a, b) => b[0] - a[0]).map(t => t[1])"
    )
    assert labels == ["Embedding"] + [f"Layer {f}" for f in drawn[1:]], "each drawn floor named, bottom to top"
    gaps = [b - a - 1 for a, b in zip(drawn, drawn[1:], strict=False) if b - a > 1]
    assert page.locator("#stage text.emb-folded").count() == len(gaps), "the layers passed over are marked"
    if gaps:
        assert f"Drawn: {len(drawn)} of the {len(d['floors'])} floors" in page.locator("#stage .emb-note").inner_text()
    page.wait_for_function(f"() => ({SHOWN})() === {len(drawn)}")
    readouts = page.locator("#stage .readouts").inner_text()
    assert str(n) in readouts and f"{d['model']['dim']:,}" in readouts and "8,192" in readouts
    page.wait_for_function("() => location.search.includes('Juliet')")  # the URL follows the drawn state


def test_labels_need_no_decoder_ring(page, base_url):
    """No ×n change markers; a piece that is part of a character shows its bytes as ‹..›, and the legend says so."""
    wide(page)
    prompt = "The GPU streams 🦙 tokens"
    open_page(page, base_url + f"/tour/embeddings?autoplay=0&prompt={quote(prompt)}")
    d = api(page, base_url, prompt=prompt)
    svg_text = page.locator("#stage .emb-figure svg").text_content()
    assert "×" not in svg_text and "<" not in svg_text
    chips = page.locator("#stage text.emb-chip-text").all_text_contents()
    partial = [i for i, t in enumerate(d["tokens"]) if t["text"] is None]
    assert partial and all("‹" in chips[i] and "›" in chips[i] for i in partial)
    hexes = {t["bytes"].split(" ")[-1] for t in d["tokens"] if t["text"] is None}
    assert any(h in " ".join(chips) for h in hexes)
    legend = page.locator("#stage .emb-legend").inner_text()
    assert "‹F0 9F› = raw bytes" in legend and "· is a space" in legend and "full bar = 100%" in legend
    guesses = page.locator("#stage text.emb-guess")
    assert guesses.count() > 0
    assert all(g.evaluate("e => getComputedStyle(e).opacity") == "1" for g in guesses.all()[:5])


def test_the_legend_says_how_colours_are_scaled_and_the_switch_changes_it(page, base_url):
    wide(page)
    open_page(page, base_url + "/tour/embeddings?autoplay=0")
    d = api(page, base_url, prompt="The capital of France is")
    note = page.locator("#stage .emb-note").inner_text()
    assert "each floor scaled to its own range" in note
    ranges = page.locator("#stage .emb-figure text.emb-small:text-matches('^colour ±')").count()
    assert ranges == len(d["drawn_floors"]), "each floor states its own range"
    img = "() => document.querySelector('#stage g.emb-floor image').getAttribute('href')"
    before = page.evaluate(img)
    change(page, lambda: page.select_option("#ctl-colours", "shared"))
    note = page.locator("#stage .emb-note").inner_text()
    shared = f"{d['shared_scale']:.3g}".rstrip("0").rstrip(".")
    assert "one scale for every floor" in note and shared in note.replace(",", "")
    assert page.evaluate(img) != before and "colours=shared" in page.url


def test_the_lens_lists_every_floor_for_the_last_token(page, base_url):
    wide(page)
    open_page(page, base_url + "/tour/embeddings?prompt=To%20be%2C%20or%20not&autoplay=0")
    d = api(page, base_url, prompt="To be, or not")
    rows = page.locator("#stage .emb-lens-list li")
    assert rows.count() == len(d["floors"]), "the last token: what every floor would say"
    top = d["floors"][-1]["lens"][-1][0]
    assert rows.first.locator(".emb-lens-floor").inner_text().lower() == f"layer {len(d['floors']) - 1}"
    assert f"{round(100 * top['p'])}%" in rows.first.inner_text()
    ladder = page.locator("#stage g.emb-ladder")
    if len(d["drawn_floors"]) < len(d["floors"]):  # beside the tower: every floor's guess, the top layer first
        assert page.locator("#stage g.emb-ladder-row").count() == len(d["floors"]) and ladder.is_visible()
        assert page.locator("#stage g.emb-ladder-row.drawn").count() == len(d["drawn_floors"])
        lines = page.locator("#stage g.emb-ladder-row text.emb-lens-text").all_text_contents()
        assert lines[0].split()[-1] == f"{round(100 * top['p'])}%"
    first = page.locator("#stage .emb-token").first
    first.focus()
    assert "selected" in first.get_attribute("class")
    assert "After To" in page.locator("#stage .emb-lens-title").inner_text()
    assert rows.count() == len(d["drawn_floors"]), "another token: the drawn floors"
    assert ladder.count() == 0 or not ladder.is_visible()
    assert "To" in page.locator("#stage .emb-lens-head").text_content()
    page.keyboard.press("ArrowRight")
    assert "selected" in page.locator("#stage .emb-token").nth(1).get_attribute("class")
    assert "be" in page.locator("#stage .emb-lens-title").inner_text()


def test_the_toy_model_draws_every_floor(page, base_url):
    open_page(page, base_url + "/tour/embeddings?autoplay=0&model=toy")
    toy = served_model("toy").model.config
    assert page.locator("#stage g.emb-floor").count() == toy.n_layers + 1
    assert page.locator("#stage .model-note").count() == 0
    assert "toy" in page.locator("#stage .emb-note").inner_text()


def test_steps_freeze_the_rise_and_reduced_motion_jumps_to_the_end(phone, base_url):
    open_page(phone, base_url + "/tour/embeddings")
    n = len(api(phone, base_url, prompt="The capital of France is")["drawn_floors"])
    assert phone.evaluate(SHOWN) == n, "reduced motion: every floor at once"
    open_page(phone, base_url + "/tour/embeddings?step=0")
    phone.wait_for_function(f"() => ({SHOWN})() === 0")
    open_page(phone, base_url + "/tour/embeddings?step=2")
    phone.wait_for_function(f"() => ({SHOWN})() === 2")
    assert phone.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"), (
        "no sideways scroll at 390 px"
    )


def test_generate_streams_to_an_eventsource(page, base_url):
    """/api/generate (mounted with this chapter) as chapter 11's chat box reads it: EventSource, closed on done."""
    m = served_model("toy").model
    open_page(page, base_url + "/tour/embeddings?autoplay=0")
    got = page.evaluate("""() => new Promise((resolve, reject) => {
      const es = new EventSource('/api/generate?model=toy&prompt=ROMEO%3A&max_tokens=6&temperature=0&tokens_per_s=100');
      const out = { ids: [], text: '' };
      es.addEventListener('token', (e) => { const t = JSON.parse(e.data); out.ids.push(t.id); out.text += t.text; });
      es.addEventListener('done', (e) => { es.close(); out.done = JSON.parse(e.data); resolve(out); });
      es.onerror = () => { es.close(); reject(new Error('stream failed')); };
    })""")
    expect = list(m.generate(m.encode("ROMEO:"), 6, temperature=0.0))
    assert got["ids"] == expect and got["text"] == m.decode(expect)
    assert got["done"]["num_tokens"] == 6


def test_the_rise_ends_with_every_drawn_floor_shown(page, base_url):
    page.goto(base_url + "/tour/embeddings")
    n = len(api(page, base_url, prompt="The capital of France is")["drawn_floors"])
    page.wait_for_function(f"() => ({SHOWN})() === {n}", timeout=20000)


def test_typing_after_an_empty_prompt_draws_again(page, base_url):
    """An empty prompt clears the selected token; the next prompt selects its last token and draws every floor."""
    open_page(page, base_url + "/tour/embeddings?prompt=&autoplay=0")
    page.wait_for_function("() => document.querySelector('#stage .emb-note')?.textContent.startsWith('Type a prompt')")
    page.locator("#ctl-prompt").type("To be", delay=10)
    n = len(api(page, base_url, prompt="To be")["drawn_floors"])
    page.wait_for_function(f"() => ({SHOWN})() === {n}")
    assert page.locator("#stage-status").inner_text() == ""
    assert "selected" in page.locator("#stage .emb-token").last.get_attribute("class")


def test_the_page_decodes_the_packed_vectors_as_the_server_packed_them(page, base_url):
    """static/js/lib/packed.js gives the numbers api/packed.unpack gives (each within the stated tolerance of the
    float32 vectors: tests/api/test_embeddings.py), outliers (float16) included."""
    import numpy as np

    from inside_llm.api.packed import unpack

    prompt = "Juliet is the sun, and Romeo"
    open_page(page, base_url + f"/tour/embeddings?autoplay=0&prompt={quote(prompt)}")
    d = api(page, base_url, prompt=prompt)
    got = page.evaluate(
        """async (floors) => {
          const { rows } = await import('/static/js/lib/packed.js');
          return floors.map((p) => rows(p).map((r) => Array.from(r)));
        }""",
        [f["vectors"] for f in d["floors"] if f["drawn"]],
    )
    for f, js in zip([f for f in d["floors"] if f["drawn"]], got, strict=True):
        np.testing.assert_allclose(np.array(js, np.float32), unpack(f["vectors"]), rtol=1e-6, atol=0)
