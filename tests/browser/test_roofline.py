"""Chapter 5 in a real Chromium: the roofline draws, the decode point climbs as the batch grows."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

DOT = "#stage circle.rf-point.decode"


def point(page):
    return page.evaluate(
        f"() => {{ const c = document.querySelector('{DOT}'); return [+c.getAttribute('cx'), +c.getAttribute('cy')]; }}"
    )


# The tween is over when a point sits on its own stop of its dotted path (batches and prompts are powers of 2).
AT_STOP = """([sel, stops, value, values]) => {
  const dot = document.querySelector(sel);
  if (!dot || dot.getAttribute('aria-valuenow') !== String(value)) return false;
  const stop = [...document.querySelectorAll(stops)][values.indexOf(value)];
  return !!stop && Math.abs(+dot.getAttribute('cx') - +stop.getAttribute('cx')) < 0.5
    && Math.abs(+dot.getAttribute('cy') - +stop.getAttribute('cy')) < 0.5;
}"""
BATCHES = [2**i for i in range(11)]
PROMPTS = [2**i for i in range(7, 13)]


def settle(page, batch):
    page.wait_for_function(AT_STOP, arg=[DOT, "#stage circle.rf-curve-dot:not(.prefill)", batch, BATCHES])


def test_roofline_draws_roofs_ridge_and_points(page, base_url):
    page.goto(base_url + "/tour/roofline")
    settle(page, 1)
    svg = page.locator("#stage svg.roofline-svg")
    assert svg.locator("line.rf-roof.memory").count() == 1 and svg.locator("line.rf-roof.compute").count() == 1
    assert "ridge · 295 FLOP/byte" in svg.locator("text.rf-ridge-label").text_content()
    titles = " ".join(svg.locator("text.rf-axis-title").all_text_contents())
    assert "FLOP" in titles and "byte" in titles and "TFLOP/s" in titles
    assert svg.locator("circle.rf-curve-dot:not(.prefill)").count() == 11  # batch 1 .. 1024
    assert svg.locator("circle.rf-curve-dot.prefill").count() == 6  # prompts of 128 .. 4,096 tokens
    readouts = page.locator("#stage .readouts").inner_text()
    assert "0.16%" in readouts and "Memory" in readouts
    assert page.console_errors == []


def test_batch_slider_moves_the_decode_point_up_the_slope(page, base_url):
    page.goto(base_url + "/tour/roofline")
    settle(page, 1)
    x1, y1 = point(page)
    page.evaluate(
        "() => { const s = document.querySelector('#ctl-batch'); s.value = 6; s.dispatchEvent(new Event('input', {bubbles: true})); }"
    )
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


PDOT = "#stage circle.rf-point.prefill"
# Every label that is placed around the points, and the points themselves (the rotated memory-roof label's
# box is a diagonal's bounding box, so it is checked by the placer's own cost instead).
OVERLAPS = """() => {
  const sel = '#stage svg.roofline-svg :is(.rf-label:not(.memory), .rf-ridge-label, .rf-batch, .rf-prompt, ' +
    'circle.rf-point, circle.rf-ridge-dot)';
  const els = [...document.querySelectorAll(sel)].filter(e => e.getAttribute('visibility') !== 'hidden');
  const boxes = els.map(e => [e.textContent || e.getAttribute('class'), e.getBoundingClientRect()]);
  const out = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, ra] = boxes[i], [b, rb] = boxes[j];
    const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left), h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
    if (w > 1 && h > 1) out.push(`${a} × ${b}`);
  }
  return { overlaps: out, labels: els.filter(e => e.tagName === 'text').map(e => e.textContent) };
}"""


def settle_both(page, batch, prompt):
    settle(page, batch)
    page.wait_for_function(AT_STOP, arg=[PDOT, "#stage circle.rf-curve-dot.prefill", prompt, PROMPTS])


@pytest.mark.parametrize("size", [(1280, 860), (390, 844)])
def test_labels_near_the_ridge_do_not_collide(browser, base_url, size):
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = ctx.new_page()
    for query, batch in (
        ("model=llama-3.1-8b&tp=1", 1),
        ("model=llama-3.1-8b&tp=1&batch=64", 64),
        ("model=llama-3.1-8b&tp=1&batch=512", 512),
        ("model=llama-3.1-8b&tp=1&batch=256&prompt_tokens=256", 256),
        ("", 1),
        ("batch=512", 512),
    ):
        page.goto(f"{base_url}/tour/roofline?{query}")
        settle(page, batch)
        got = page.evaluate(OVERLAPS)
        assert got["overlaps"] == [], (query, got)
        assert any(t.startswith("decode") for t in got["labels"]) and any(
            t.startswith("prefill") for t in got["labels"]
        )
        assert any(t.startswith("ridge") for t in got["labels"])
    ctx.close()


def test_memory_bandwidth_never_breaks_inside_a_word_on_a_phone(browser, base_url):
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    page = ctx.new_page()
    page.goto(base_url + "/tour/roofline")
    settle(page, 1)
    lines = page.evaluate("""() => [...document.querySelectorAll('#stage .roofline-scene .readout')].flatMap(r => {
      const walker = document.createTreeWalker(r, NodeFilter.SHOW_TEXT), out = [];
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        for (const m of n.textContent.matchAll(/[A-Za-z]{4,}/g)) {
          const range = document.createRange();
          range.setStart(n, m.index); range.setEnd(n, m.index + m[0].length);
          const tops = new Set([...range.getClientRects()].map(b => Math.round(b.top)));
          out.push([m[0], tops.size]);
        }
      }
      return out; })""")
    words = dict(lines)
    assert words["Memory"] == 1 and words["bandwidth"] == 1, lines
    assert all(n == 1 for _, n in lines), lines
    ctx.close()


def test_reuse_picture_shows_one_fetch_serving_many_tokens(page, base_url):
    page.goto(base_url + "/tour/roofline")
    settle(page, 1)
    d = page.request.get(base_url + "/api/roofline").json()
    rows = page.evaluate("""() => [...document.querySelectorAll('#stage .rf-reuse-row')].map(r => ({
      tiles: r.querySelectorAll('.rf-reuse-tile').length, tokens: r.querySelectorAll('.rf-reuse-token').length,
      fan: r.querySelectorAll('.rf-reuse-fan line').length, more: r.querySelector('.rf-reuse-more')?.textContent || '',
      text: [...r.querySelectorAll('text')].map(t => t.textContent).join(' | '),
      tokenW: r.querySelector('.rf-reuse-token').getBoundingClientRect().width }))""")
    pre, dec = rows
    assert pre["tiles"] == dec["tiles"] == 1  # one weight fetch per step in both phases
    # 1,024 prompt tokens: as many squares as the row holds (each with its line from the tile), then "+ the rest"
    assert pre["tokens"] == pre["fan"] >= 20 and pre["tokens"] + int(pre["more"].lstrip("+").replace(",", "")) == 1024
    assert dec["tokens"] == dec["fan"] == 1 and dec["more"] == ""
    assert "1 fetch → 1,024 tokens" in pre["text"] and "1 fetch → 1 token" in dec["text"]
    assert f"{d['prefill']['arithmetic_intensity']:,.0f} FLOP per byte" in pre["text"]
    assert pre["tokenW"] >= 7  # squares big enough to count
    page.evaluate(
        "() => { const s = document.querySelector('#ctl-batch'); s.value = 3; s.dispatchEvent(new Event('input', {bubbles: true})); }"
    )
    settle(page, 8)
    dec = page.evaluate("() => document.querySelectorAll('#stage .rf-reuse-row.decode .rf-reuse-token').length")
    assert dec == 8
    assert page.console_errors == []


def test_drag_either_point_along_its_path(page, base_url):
    page.goto(base_url + "/tour/roofline")
    settle_both(page, 1, 1024)
    curve = page.evaluate("""() => [...document.querySelectorAll('#stage circle.rf-curve-dot')].map(c => {
      const r = c.getBoundingClientRect(); return [c.classList.contains('prefill'), r.x + r.width / 2, r.y + r.height / 2]; })""")
    decode_stops = [c[1:] for c in curve if not c[0]]
    prefill_stops = [c[1:] for c in curve if c[0]]
    box = page.locator(DOT).bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(*decode_stops[3], steps=8)  # batch 8
    page.mouse.move(*decode_stops[6], steps=8)  # batch 64
    page.mouse.up()
    settle_both(page, 64, 1024)
    assert "batch=64" in page.url
    box = page.locator(PDOT).bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(*prefill_stops[0], steps=8)  # a 128-token prompt: left of the ridge
    page.mouse.up()
    settle_both(page, 64, 128)
    assert "prompt_tokens=128" in page.url
    # Keyboard: the prefill point steps through prompt lengths, Home/End jump to the ends.
    page.locator(PDOT).focus()
    page.keyboard.press("ArrowRight")
    settle_both(page, 64, 256)
    page.keyboard.press("End")
    settle_both(page, 64, 4096)
    label = page.locator("#stage text.rf-label.prefill").text_content()
    assert label.startswith("prefill · 4,096 tokens × 64 ·")
    assert page.console_errors == []


# ---- "Measured on this server": this CPU's own roofline ----------------------------------------


def test_measured_cpu_roofline_draws_the_responses_roofs_and_points(page, base_url):
    import json
    import math
    import urllib.request

    from pagekit import js_num, measured_panel, open_page

    open_page(page, base_url + "/tour/roofline")  # the chart draws without waiting for the measurement
    assert page.locator("#stage svg.roofline-svg").count() == 1
    panel = measured_panel(page)
    assert panel.get_attribute("data-measured") == "shown"
    with urllib.request.urlopen(base_url + "/api/roofline/measured") as r:  # measured once: the numbers drawn
        m = json.load(r)
    roofs, pre, dec, pred, sv = m["roofs"], m["prefill"], m["decode"], m["decode_prediction"], m["served_decode"]
    svg = panel.locator("svg.mp-roofline")
    assert svg.locator("line.mp-roof").count() == 2
    assert svg.locator("circle.mp-point").count() == (2 if sv is None else 3)  # + decode as served (int8)

    def ticks(axis):
        return [
            (float(t.get_attribute("data-value")), float(t.get_attribute("x" if axis == "x" else "y")))
            for t in svg.locator(f"text.mp-{axis}tick").all()
        ]

    def scale(axis):
        """value -> SVG coordinate, from two of the axis's own ticks (log scale)."""
        (v0, p0), (v1, p1) = ticks(axis)[0], ticks(axis)[-1]
        per = (p1 - p0) / (math.log10(v1) - math.log10(v0))
        off = 4 if axis == "y" else 0  # y tick labels sit 4 units below their line (baseline)
        return lambda v: p0 - off + per * (math.log10(v) - math.log10(v0))

    x, y = scale("x"), scale("y")
    bw, peak, ridge = (
        roofs["memory_bandwidth_bytes_per_second"],
        roofs["matrix_multiply_flops_per_second"],
        roofs["ridge_flops_per_byte"],
    )
    mem, comp = svg.locator("line.mp-roof.memory"), svg.locator("line.mp-roof.compute")
    assert float(mem.get_attribute("x2")) == pytest.approx(x(ridge), abs=0.6)  # the roofs meet at the ridge ...
    assert float(mem.get_attribute("y2")) == pytest.approx(y(peak), abs=0.6)  # ... at the compute roof's height
    assert float(comp.get_attribute("y1")) == pytest.approx(y(peak), abs=0.6)
    x1 = float(mem.get_attribute("x1"))  # the memory roof is bandwidth x intensity: its left end, read back
    assert float(mem.get_attribute("y1")) == pytest.approx(y(bw * 10 ** ((x1 - x(1)) / (x(10) - x(1)))), abs=0.6)
    names = {"prefill": "prefill", "decode": "decode" if sv is None else "decode, float32", "served": "decode, int8"}
    for cls, p in (("prefill", pre), ("decode", dec), ("served", sv)):
        if p is None:
            continue
        dot = svg.locator(f"circle.mp-point.{cls}")
        assert dot.get_attribute("data-phase") == p["phase"] and dot.get_attribute("data-weights") == p["weights"]
        assert float(dot.get_attribute("cx")) == pytest.approx(x(p["arithmetic_intensity"]), abs=0.6)
        drawn_at = p["roof_flops_per_second"] if p["above_roof"] else p["attained_flops_per_second"]
        assert float(dot.get_attribute("cy")) == pytest.approx(y(drawn_at), abs=0.6)
        assert dot.get_attribute("data-above-roof") == str(p["above_roof"]).lower()
        assert f"{names[cls]}" in svg.inner_html() and f"{js_num(p['tokens_per_second'])} tokens/s" in svg.inner_html()
    if sv is not None:  # the served form reads fewer bytes for the same products: right of the float32 decode
        assert sv["weights"] == "int8" and sv["bytes_per_token"] < dec["bytes_per_token"] / 3
        assert float(svg.locator("circle.mp-point.served").get_attribute("cx")) > float(
            svg.locator("circle.mp-point.decode").get_attribute("cx")
        )
        served_line = panel.locator(".mp-served-line strong").inner_text()
        assert (
            served_line.startswith("This server decodes from int8: ") and js_num(sv["tokens_per_second"]) in served_line
        )
    assert (
        float(svg.locator("circle.mp-point.decode").get_attribute("cx"))
        < x(ridge)
        < float(svg.locator("circle.mp-point.prefill").get_attribute("cx"))
    )
    readouts = panel.locator(".mp-readouts").inner_text()
    assert js_num(bw / 1e9) in readouts and js_num(peak / 1e9) in readouts and js_num(ridge) in readouts
    assert js_num(pre["tokens_per_second"]) in readouts and js_num(dec["tokens_per_second"]) in readouts
    line = panel.locator(".mp-predict strong").first.inner_text()
    assert line == (
        f"Decode predicted from bandwidth: {js_num(pred['predicted_milliseconds_per_token'])} ms/token; "
        f"measured: {js_num(pred['measured_milliseconds_per_token'])} ms/token."
    )
    assert m["model"]["display_name"][:6].lower() in panel.locator(".mp-note").first.inner_text().lower()
